"""A ``.half()`` under ``if fp16_run:`` written inside the autocast block: the branch picks
the precision mode, but autocast is already on there, and the cast forces the fp32 mel
loss below into float16. ``autocast`` comes from ``torch.xpu.amp`` on one import path and
from ``torch.cuda.amp`` on the others (a device choice, not a version fallback): the block
is an autocast block all the same."""

import torch

try:
    if torch.xpu.is_available():
        from torch.xpu.amp import autocast
    else:
        from torch.cuda.amp import GradScaler, autocast  # expect: AMP006
except Exception:
    from torch.cuda.amp import GradScaler, autocast  # expect: AMP006


def train(hps, net_g, loader, optim_g, to_mel):
    scaler = GradScaler(enabled=hps.fp16_run)  # expect: AMP006
    for spec, wave in loader:
        with autocast(enabled=hps.fp16_run):  # expect: AMP006
            y_hat = net_g(spec)
            with autocast(enabled=False):  # expect: AMP006
                y_hat_mel = to_mel(y_hat.float())
            if hps.fp16_run:
                y_hat_mel = y_hat_mel.half()  # expect: AMP007
            with autocast(enabled=False):  # expect: AMP006
                loss = torch.nn.functional.l1_loss(to_mel(wave), y_hat_mel)
        optim_g.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optim_g)
        scaler.update()

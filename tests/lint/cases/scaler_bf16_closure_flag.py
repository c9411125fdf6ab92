"""The autocast and the scaler are built in the enclosing function, enabled by the same
flag, and used by a nested epoch function: when ``amp`` is true the scaler runs with a
bfloat16 region."""

import torch


def main(model, loader, optimizer, amp: bool = False):
    device = torch.device("cuda")
    autocast_ctx = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp)
    scaler = torch.amp.GradScaler(device=device.type, enabled=amp)

    def run_epoch():
        for x in loader:
            with autocast_ctx:
                loss = model(x).mean()
            scaler.scale(loss).backward()  # expect: AMP008
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

    run_epoch()

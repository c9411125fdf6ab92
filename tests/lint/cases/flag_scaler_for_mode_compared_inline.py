"""The precision mode is compared with its names inline: the scaler is on for "fp16" and
"bf16" alike, and the autocast picks bfloat16 for "bf16" (AMP008, when `mixed_precision`
is 'bf16'). The mode holds strings, not dtypes, although it also decides the dtype."""

import torch


def train(args, model, optimizer, loader):
    use_amp = args.mixed_precision in ("fp16", "bf16")
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    for x, y in loader:
        with torch.autocast(
            "cuda",
            dtype=torch.bfloat16 if args.mixed_precision == "bf16" else torch.float16,
            enabled=use_amp,
        ):
            loss = model(x, y)
        scaler.scale(loss).backward()  # expect: AMP008
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

"""The fix: the scaler is on only when the mode is "fp16", whatever the autocast picks."""

import torch


def train(args, model, optimizer, loader):
    use_amp = args.mixed_precision in ("fp16", "bf16")
    scaler = torch.amp.GradScaler("cuda", enabled=args.mixed_precision == "fp16")
    for x, y in loader:
        with torch.autocast(
            "cuda",
            dtype=torch.bfloat16 if args.mixed_precision == "bf16" else torch.float16,
            enabled=use_amp,
        ):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

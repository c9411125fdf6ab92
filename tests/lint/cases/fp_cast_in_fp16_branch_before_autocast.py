"""The precision mode's own cast, outside the autocast block (``if fp16: x = x.half()``
before it): a mode choice, left alone."""

import torch


def train(args, model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
    for x, y in loader:
        if args.fp16:
            x = x.half()
        with torch.autocast("cuda", dtype=torch.float16, enabled=args.fp16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

"""Conditional rebinding decided with the dtype: the scaler exists only in the float16
configuration, so it never meets the bfloat16 autocast."""

import torch


def train(model, loader, optimizer, precision: str):
    if precision == "fp16":
        scaler = torch.amp.GradScaler("cuda")
        dtype = torch.float16
    else:
        scaler = None
        dtype = torch.bfloat16
    for x, y in loader:
        with torch.autocast("cuda", dtype=dtype):
            loss = model(x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()

"""Conditional rebinding: the scaler exists only when `use_scaler` is true, and then it
scales the loss of a bfloat16 autocast (AMP008, when `use_scaler` is true)."""

import torch


def train(model, loader, optimizer, use_scaler: bool):
    if use_scaler:
        scaler = torch.amp.GradScaler("cuda")
    else:
        scaler = None
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        if scaler is not None:
            scaler.scale(loss).backward()  # expect: AMP008
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()

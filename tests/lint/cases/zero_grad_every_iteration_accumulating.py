"""The gradients are zeroed at the top of every iteration while the scaler steps only every
``accum`` iterations: each step sees the last micro-batch alone."""

import torch


def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()  # expect: AMP014
        with torch.autocast("cuda"):
            loss = model(x, y) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()

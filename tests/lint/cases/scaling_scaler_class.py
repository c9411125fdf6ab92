"""A scaler class of the project whose scale multiplies the loss is a scaler: stepping the
optimizer directly skips its unscale and inf check."""

import torch


class StaticScaler:
    def __init__(self, factor):
        self.factor = factor

    def scale(self, loss):
        return loss * self.factor


def train(model, loader, optimizer):
    scaler = StaticScaler(1024.0)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        optimizer.step()  # expect: AMP004
        optimizer.zero_grad()

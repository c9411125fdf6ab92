"""A scaler class of the project whose scale(loss) returns the loss: stepping the optimizer
directly after its "scaled" backward bypasses nothing."""

import torch


class NoScaler:
    def scale(self, loss):
        return loss

    def step(self, optimizer):
        optimizer.step()

    def update(self):
        pass


def train(model, loader, optimizer):
    scaler = NoScaler()
    for x, y in loader:
        loss = model(x, y)
        scaler.scale(loss).backward()
        optimizer.step()
        optimizer.zero_grad()

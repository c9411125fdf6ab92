"""An autocast block around a call of a function, or of a method of the class, that runs
the forward and the backward: the backward runs inside the block all the same. Reported
at the call."""

import torch


def forward_backward(model, batch):
    loss = model(batch).mean()
    loss.backward()
    return loss


def train(model, loader, optimizer):
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward_backward(model, batch)  # expect: AMP012
        optimizer.step()
        optimizer.zero_grad()


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def _step(self, batch):
        loss = self.model(batch).mean()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def fit(self, loader):
        for batch in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                self._step(batch)  # expect: AMP012

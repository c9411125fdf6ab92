"""The loss is scaled by the caller: every call of _backward passes scaler.scale(loss), so
the backward inside it is a scaled backward."""

import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def _backward(self, loss):
        loss.backward()

    def train_step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x, y)
        self._backward(self.scaler.scale(loss))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

"""One caller of _backward passes the loss unscaled while the step goes through the scaler:
the backward inside it is not always a scaled one."""

import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def _backward(self, loss):
        loss.backward()  # expect: AMP003

    def train_step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x, y)
        self._backward(self.scaler.scale(loss))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

    def extra_step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x, y)
        self._backward(loss)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

"""The base trainers: the backward and the optimizer step live here, the training loops in
the subclasses of other files."""

import torch


class PlainTrainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def backward(self, loss):
        loss.backward()

    def optimizer_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()


class ScaledTrainer(PlainTrainer):
    def __init__(self, model, optimizer):
        super().__init__(model, optimizer)
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.grad_scaler.scale(loss).backward()

    def optimizer_step(self):
        self.grad_scaler.step(self.optimizer)
        self.finish_step()

    def finish_step(self):
        self.grad_scaler.update()
        self.optimizer.zero_grad()

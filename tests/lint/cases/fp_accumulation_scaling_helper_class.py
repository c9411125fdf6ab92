"""Helper classes that hand back a scaled loss, silent: one divides by its accumulation
count before scaling, one steps on every call (nothing accumulates), and one whose caller
in the file divides the loss it passes."""

import torch


class DividingScaler:
    def __init__(self, scaler: torch.amp.GradScaler, accumulate_iter: int) -> None:
        self.scaler = scaler
        self.accumulate_iter = accumulate_iter

    def scale_loss(self, loss):
        return self.scaler.scale(loss / self.accumulate_iter)

    def optimizer_step(self, optimizer, cur_iter):
        if cur_iter % self.accumulate_iter == 0:
            self.scaler.step(optimizer)
            self.scaler.update()


class EveryCallScaler:
    def __init__(self, scaler: torch.amp.GradScaler) -> None:
        self.scaler = scaler

    def scale_loss(self, loss):
        return self.scaler.scale(loss)

    def optimizer_step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()


class CallerDividesScaler:
    def __init__(self, scaler: torch.amp.GradScaler, accum_steps: int) -> None:
        self.scaler = scaler
        self.accum_steps = accum_steps

    def scale_loss(self, loss):
        return self.scaler.scale(loss)

    def optimizer_step(self, optimizer, step):
        if (step + 1) % self.accum_steps == 0:
            self.scaler.step(optimizer)
            self.scaler.update()


def train(model, loader, optimizer, helper: CallerDividesScaler):
    for step, (x, y) in enumerate(loader):
        loss = model(x, y)
        helper.scale_loss(loss / helper.accum_steps).backward()
        helper.optimizer_step(optimizer, step)

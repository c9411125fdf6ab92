"""A mixed-precision helper class: its step method steps the scaler every
``accumulate_iter`` calls, and ``scale_loss`` hands back the scaled loss for the caller's
backward, undivided, so ``accumulate_iter`` whole losses add up before each step."""

import torch


class AMPScaler:
    def __init__(self, *, scaler: torch.amp.GradScaler, accumulate_iter: int = 1) -> None:
        self.scaler = scaler
        self._accumulate_iter = accumulate_iter

    def scale_loss(self, loss):
        return self.scaler.scale(loss)  # expect: AMP011

    def optimizer_step(self, optimizer, *, cur_iter: int):
        if cur_iter % self._accumulate_iter == 0:
            self.scaler.step(optimizer)
            self.scaler.update()

    def optimizer_zero(self, optimizer, *, cur_iter: int):
        if cur_iter % self._accumulate_iter == 0:
            optimizer.zero_grad()

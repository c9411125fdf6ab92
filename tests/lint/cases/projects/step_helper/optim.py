"""An optimizer wrapper whose step goes through the scaler its caller passes; the caller
updates the scaler after it (train.py), so this file alone shows no update."""

import torch


class ScheduledOptim:
    def __init__(self, model, lr):
        self._optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def step_and_update_lr(self, scaler):
        scaler.step(self._optimizer)

    def zero_grad(self):
        self._optimizer.zero_grad()

"""The same updater unscaling the given scaler before the clip."""

import torch


class Updater:
    def __init__(self, network, optimizer, clip):
        self.network = network
        self.optimizer = optimizer
        self.clip = clip

    def step(self, *, grad_scaler=None):
        if grad_scaler is not None:
            grad_scaler.unscale_(self.optimizer)
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.network.parameters(), self.clip)
        if grad_scaler is not None:
            grad_scaler.step(self.optimizer)
            grad_scaler.update()
        else:
            self.optimizer.step()

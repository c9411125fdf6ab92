"""An updater that clips and then steps through the scaler it is given, with no unscale_:
the scaled backward lives elsewhere (the caller), the clip sees scaled gradients."""

import torch


class Updater:
    def __init__(self, network, optimizer, clip):
        self.network = network
        self.optimizer = optimizer
        self.clip = clip

    def step(self, *, grad_scaler=None):
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.network.parameters(), self.clip)  # expect: AMP001
        if grad_scaler is not None:
            grad_scaler.step(self.optimizer)
            grad_scaler.update()
        else:
            self.optimizer.step()

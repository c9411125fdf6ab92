"""A trainer that scales its loss turns on the clamping hooks of another module: they clamp
the scaled gradients inside the backward, before any unscale_ (AMP001 at the call)."""

import torch

import grad_util


class Trainer:
    def __init__(self, model, optimizer, limit):
        self.model, self.optimizer, self.limit = model, optimizer, limit
        self.scaler = torch.amp.GradScaler("cuda")

    def train(self, loader):
        grad_util.enable_gradient_clipping(self.model, self.limit)  # expect: AMP001
        for batch in loader:
            with torch.autocast("cuda"):
                loss = self.model(batch)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

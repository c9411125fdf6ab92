"""float16 autocast in subclasses of a base class (another file) that scales the loss and
steps and updates the scaler: nothing to report."""

import torch

from engine import base


class Fp16Trainer(base.ScaledTrainer):
    def train(self, loader):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x, y)
            self.backward(loss)
            self.optimizer_step()


class OwnStepTrainer(base.ScaledTrainer):
    def train(self, loader):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x, y)
            self.grad_scaler.scale(loss).backward()
            self.grad_scaler.step(self.optimizer)
            self.finish_step()

"""The subclass clips right after the base class's scaled backward, without unscale_."""

import torch

from engine.base import ScaledTrainer


class ClipTrainer(ScaledTrainer):
    def train(self, loader):
        for x in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x)
            self.backward(loss)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)  # expect: AMP001
            self.optimizer_step()

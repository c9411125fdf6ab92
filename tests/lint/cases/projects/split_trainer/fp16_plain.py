"""float16 autocast in a subclass whose base class (another file) runs an unscaled backward
and a plain optimizer step: fp16 training without a scaler."""

import torch

from engine.base import PlainTrainer
from engine.loop import LoopTrainer


class Fp16Trainer(PlainTrainer):
    def train(self, loader):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
                loss = self.model(x, y)
            self.backward(loss)
            self.optimizer_step()


class DeeperTrainer(LoopTrainer):
    def train(self, loader):
        for x in loader:
            with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
                loss = self.model(x)
            self.backward(loss)
            self.optimizer_step()

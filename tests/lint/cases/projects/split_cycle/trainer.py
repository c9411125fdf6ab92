"""Bases that import each other in a cycle, a helper function of the base's own file, and a
base in a file that does not parse: each is followed as far as it goes, never forever."""

import torch

from base_cycle import CycleBase
from broken_base import Broken


class CycleTrainer(CycleBase):
    def train(self, loader):
        for x in loader:
            with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
                loss = self.model(x)
            self.backward(loss)
            self.step()


class BrokenTrainer(Broken):
    def train(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x)
        self.backward(loss)
        self.step()

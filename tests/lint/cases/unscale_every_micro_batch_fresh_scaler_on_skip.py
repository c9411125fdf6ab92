"""``unscale_`` after every micro-batch, the update only every ``accum_steps``: replacing
the scaler when the gradients are not finite does not help the micro-batches in between,
whose second ``unscale_`` raises. The message names the accumulation guard."""

import torch
from torch.amp import GradScaler


class Trainer:
    def __init__(self, model, optimizer, accum_steps):
        self.model = model
        self.optimizer = optimizer
        self.accum_steps = accum_steps
        self.scaler = GradScaler()

    def epoch(self, loader):
        for i, x in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x) / self.accum_steps
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)  # expect: AMP010
            bad = any(not torch.isfinite(p.grad).all() for p in self.model.parameters())
            if bad:
                self.optimizer.zero_grad()
                if self.scaler is not None:
                    self.scaler = GradScaler()
                continue
            if (i + 1) % self.accum_steps == 0:
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad()

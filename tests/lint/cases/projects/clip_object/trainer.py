"""The trainer clips through the object before unscaling (reported), through the function
after unscaling (fine), logs through a callable that does not clip (fine), and hands the
whole step to a helper that unscales before it clips (fine)."""

import torch

from modeling.common import ClipGrad, Logger, clip_all, unscale_clip_step


class Trainer:
    def __init__(self, model, optimizer, cfg):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        self.clip_grad = ClipGrad(cfg["type"], cfg["max_norm"])
        self.log_norm = Logger()

    def train_epoch(self, loader):
        for batch in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(batch).mean()
            self.scaler.scale(loss).backward()
            self.log_norm(self.model)
            self.clip_grad(self.model)  # expect: AMP001
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

    def train_epoch_unscaled(self, loader, limit):
        for batch in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(batch).mean()
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            clip_all(self.model, limit)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

    def train_epoch_helper(self, loader, limit):
        for batch in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(batch).mean()
            self.scaler.scale(loss).backward()
            unscale_clip_step(self.scaler, self.optimizer, self.model, limit)
            self.optimizer.zero_grad()

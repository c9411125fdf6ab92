"""A trainer class: backward in one method, step in another, scaler stored on self."""
from __future__ import annotations

import torch
from torch.amp import GradScaler


class Trainer:
    def __init__(self, model: torch.nn.Module, lr: float = 1e-3, accum: int = 2, fp16: bool = True) -> None:
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, 100)
        self.scaler = GradScaler("cuda", enabled=fp16)
        self.accum = accum
        self.dtype = torch.float16 if fp16 else torch.bfloat16

    def training_step(self, batch) -> torch.Tensor:
        with torch.autocast("cuda", dtype=self.dtype):
            loss = self.model(batch).mean() / self.accum
        self.scaler.scale(loss).backward()
        return loss.detach()

    def optimizer_step(self) -> None:
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def fit(self, loader, epochs: int = 1) -> None:
        for _ in range(epochs):
            for i, batch in enumerate(loader):
                self.training_step(batch)
                if (i + 1) % self.accum == 0:
                    self.optimizer_step()

    def save(self, path: str) -> None:
        torch.save({"model": self.model.state_dict(), "scaler": self.scaler.state_dict()}, path)

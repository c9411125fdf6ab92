"""The scaler is enabled by the dtype itself (`amp_dtype == torch.float16`, `not bf16`): it
never runs with the bfloat16 autocast, whatever the flags say."""

import torch


class Trainer:
    def __init__(self, cfg, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.use_amp = cfg.use_amp
        self.amp_dtype = torch.bfloat16 if cfg.amp_bf16 else torch.float16
        self.scaler = torch.amp.GradScaler(
            "cuda", enabled=self.use_amp and self.amp_dtype == torch.float16
        )

    def step(self, x, y):
        with torch.autocast("cuda", dtype=self.amp_dtype, enabled=self.use_amp):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()


def train(model, loader, optimizer, bf16: bool):
    dtype = torch.bfloat16 if bf16 else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=not bf16)
    for x, y in loader:
        with torch.autocast("cuda", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

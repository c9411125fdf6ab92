"""The autocast dtype is chosen by a config field and the scaler is enabled by another flag,
not by the dtype: with `amp_bf16` and `use_amp` both true a bfloat16 loss is scaled."""

import torch


class Trainer:
    def __init__(self, cfg, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.use_amp = cfg.use_amp
        self.amp_dtype = torch.bfloat16 if cfg.amp_bf16 else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.use_amp)

    def step(self, x, y):
        with torch.autocast("cuda", dtype=self.amp_dtype, enabled=self.use_amp):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()  # expect: AMP008
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

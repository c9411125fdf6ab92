"""The same trainer after the fix: the GradScaler is enabled exactly when the option is
Precision.FP16, so float16 is always scaled and bfloat16 never is."""

import contextlib

import torch

from project.types import Precision


class Trainer:
    def __init__(self, model, options, optimizer):
        self.model = model
        self.options = options
        self.optimizer = optimizer
        self.autocast = contextlib.nullcontext()
        amp_dtype = None
        if options.precision == Precision.BF16:
            amp_dtype = torch.bfloat16
        elif options.precision == Precision.FP16:
            amp_dtype = torch.float16
        if amp_dtype:
            self.autocast = torch.amp.autocast("cuda", dtype=amp_dtype)
        self.scaler = torch.amp.GradScaler("cuda", enabled=options.precision == Precision.FP16)

    def train(self, loader):
        for batch in loader:
            with self.autocast:
                loss = self.model(**batch).loss
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

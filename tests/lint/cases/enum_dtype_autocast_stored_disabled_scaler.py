"""An autocast built in __init__ with a dtype chosen by comparing an option with enum
members, stored on the object and entered in the loop; the only GradScaler is built with
enabled=False. When the option is Precision.FP16 this trains in float16 unscaled: reported
at the autocast call, where the dtype is chosen. The disabled scaler's unscale_ and step
are no-ops, so its step is a plain optimizer step (no AMP004)."""

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
            self.autocast = torch.amp.autocast("cuda", dtype=amp_dtype)  # expect: AMP002
        self.scaler = torch.amp.GradScaler("cuda", enabled=False)

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

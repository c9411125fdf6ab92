"""The fix: with one optimizer (optimizer_idx=None) the update runs every call; with several,
after the last one's step. An update under an AMP flag is not this shape either."""

import torch


class Trainer:
    def optimize(self, batch, model, optimizer, scaler, optimizer_idx=None, num_optimizers=1):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        if optimizer_idx is None or optimizer_idx + 1 == num_optimizers:
            scaler.update()
        optimizer.zero_grad()

    def step(self, loss, optimizer, scaler, log_every=None):
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        if self.use_amp:
            scaler.update()
        if log_every is not None:
            print(scaler.get_scale())

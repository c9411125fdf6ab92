"""One step per call, the update meant for the last of several optimizers: with the
defaults (one optimizer, optimizer_idx=None) the update never runs."""

import torch


class Trainer:
    def optimize(self, batch, model, optimizer, scaler, optimizer_idx=None, num_optimizers=1):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)  # expect: AMP005
        if optimizer_idx is not None and optimizer_idx + 1 == num_optimizers:
            scaler.update()
        optimizer.zero_grad()

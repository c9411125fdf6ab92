"""The GradScaler and a bfloat16 autocast are switched on by the same flag: whenever the
autocast runs, the scaler scales a bfloat16 loss (AMP008, when `use_amp` is true)."""

import torch


def train(model, loader, optimizer, use_amp: bool):
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()  # expect: AMP008
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

"""The loop that drives the wrapper: scaled backward, the wrapper's step, then the update."""

import torch

from optim import ScheduledOptim


def train(model, loader):
    optimizer = ScheduledOptim(model, 1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        optimizer.step_and_update_lr(scaler)
        scaler.update()
        optimizer.zero_grad()

"""Clips under other names than ``clip_grad_norm_``: a project's own helper imported under
torch's old name, and that old name itself. Both clip the scaled gradients, as nothing
unscales them first."""

import torch
from utils.util import clip_grad_norm


def train(model, loader, optimizer, scaler):
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        clip_grad_norm(model.parameters(), 1.0)  # expect: AMP001
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_old_name(model, loader, optimizer, scaler):
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm(model.parameters(), 1.0)  # expect: AMP001
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

"""The fix: the gradients are clipped after scaler.unscale_, not by hooks; a clamping hook
written in the scaling file itself is reported where it is registered."""

import torch


def train(model, optimizer, loader, limit):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_value_(model.parameters(), limit)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_hooked(model, optimizer, loader, limit):
    for p in model.parameters():
        p.register_hook(lambda g: g.clamp(-limit, limit))  # expect: AMP001
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

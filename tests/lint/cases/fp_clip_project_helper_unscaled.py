"""The same clips after ``scaler.unscale_``, and an optimizer's own ``clip_grad_norm``
method (a wrapper that unscales what it holds, as fairseq's does): nothing to report."""

import torch
from utils.util import clip_grad_norm


def train(model, loader, optimizer, scaler):
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        clip_grad_norm(model.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_wrapped(model, loader, optimizer):
    for batch in loader:
        loss = model(batch).mean()
        optimizer.backward(loss)
        optimizer.clip_grad_norm(1.0)
        optimizer.step()
        optimizer.zero_grad()

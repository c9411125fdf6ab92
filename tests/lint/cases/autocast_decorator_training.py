"""A training function decorated with ``@torch.autocast``: its whole body, the backward
included, runs under float16 autocast, and nothing scales the loss."""

import torch


@torch.autocast("cuda")  # expect: AMP002
def perform_tuning(model, loader, optimizer):
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()  # expect: AMP012
        optimizer.step()
        optimizer.zero_grad()

"""The decorator on the forward-only loss function: the backward runs outside autocast,
and the loss is scaled."""

import torch


@torch.autocast("cuda")
def loss_step(model, batch):
    return model(batch).mean()


def perform_tuning(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        loss = loss_step(model, batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

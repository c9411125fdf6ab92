"""An autocast block around a call that only computes the loss, the backward after the
block; and a helper with its own autocast around the forward only, called outside any
block: nothing runs backward under autocast."""

import torch


def compute_loss(model, batch):
    return model(batch).mean()


def forward_backward(model, batch):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(batch).mean()
    loss.backward()
    return loss


def train(model, loader, optimizer):
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compute_loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def train_with_helper(model, loader, optimizer):
    for batch in loader:
        forward_backward(model, batch)
        optimizer.step()
        optimizer.zero_grad()

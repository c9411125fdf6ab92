"""The same micro-batch loop, divided properly: a backward of the divided loss, and a
backward given a constant upstream gradient of ``1 / n`` (``torch.ones_like(loss) / n``),
which divides the gradients by ``n`` as well."""

import torch

GRADIENT_ACCUMULATE_EVERY = 4


def train(model, optim, loader, steps):
    for _ in range(steps):
        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(loader))
            (loss / GRADIENT_ACCUMULATE_EVERY).backward()
        optim.step()
        optim.zero_grad()


def train_with_gradient(model, optim, loader, steps):
    for _ in range(steps):
        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(loader))
            loss.backward(torch.ones_like(loss) / GRADIENT_ACCUMULATE_EVERY)
        optim.step()
        optim.zero_grad()

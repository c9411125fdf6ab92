"""A micro-batch loop whose backward hands the divided loss to ``backward`` as its upstream
gradient: ``loss.backward(loss / n)`` backpropagates ``loss`` itself, its gradients
multiplied by the loss's value rather than divided by ``n``, and the step after the loop
takes their sum."""

import torch

GRADIENT_ACCUMULATE_EVERY = 4


def train(model, optim, loader, steps):
    for _ in range(steps):
        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(loader))
            loss.backward(loss / GRADIENT_ACCUMULATE_EVERY)  # expect: AMP011
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()

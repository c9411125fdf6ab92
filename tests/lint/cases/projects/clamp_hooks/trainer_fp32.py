"""The same hooks in a loop that does not scale its loss clamp the true gradients: silent."""

import grad_util


def train(model, optimizer, loader, limit):
    grad_util.enable_gradient_clipping(model, limit)
    for batch in loader:
        loss = model(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

"""A scaled loss reduced before its backward is still scaled: the clip after it, with no
``unscale_``, clips scaled gradients."""

import torch


def train(model, loader, optimizer, scaler):
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch)
        loss = scaler.scale(loss)
        loss.sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: AMP001
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

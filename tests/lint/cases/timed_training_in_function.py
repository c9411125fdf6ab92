"""A timed training loop in a function keeps nothing in this file, but its caller may: a
module-level benchmark is the only training that is known to be thrown away."""
import time

import torch


def train(model, loader, optimizer):
    t0 = time.perf_counter()
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
            loss = model(batch)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - t0

"""The same counter guard with the loss divided by ``n``, the length of the cycle: nothing
to report. A counter that never restarts (``if step >= max_steps: break``) is no
accumulation guard."""

import torch


def train(model, loader, scheduler, accum_grad_n_steps):
    accum_n_steps = 0
    for batch in loader:
        accum_n_steps += 1
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch).mean()
        loss = loss / accum_grad_n_steps
        loss.backward()
        if accum_n_steps >= accum_grad_n_steps:
            scheduler.step()
            scheduler.zero_grad()
            accum_n_steps = 0


def train_until(model, loader, optimizer, max_steps):
    step = 0
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total = model(batch).mean()
        total.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step >= max_steps:
            break

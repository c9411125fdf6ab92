"""Accumulation stepped by a counter that restarts (``if count >= n: ...; count = 0``): the
loss divided by the counter itself is divided by 1, 2, ..., n in turn, and a loss not
divided at all adds n micro-batches at full weight. The optimizer wrapped with its LR
schedule is named ``scheduler``: its ``step()`` and ``zero_grad()`` say what it is."""

import torch


def train(model, loader, scheduler, accum_grad_n_steps):
    accum_n_steps = 0
    for batch in loader:
        accum_n_steps += 1
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch).mean()
        loss = loss / accum_n_steps
        loss.backward()  # expect: AMP011
        if accum_n_steps >= accum_grad_n_steps or batch is None:
            scheduler.step()
            scheduler.zero_grad()
            accum_n_steps = 0


def train_undivided(model, loader, optimizer, n):
    count = 0
    for batch in loader:
        count += 1
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total = model(batch).mean()
        total.backward()  # expect: AMP011
        if count == n:
            optimizer.step()
            optimizer.zero_grad()
            count = 0

"""Zeroed right after the accumulating step, or every iteration when the step is too, and
a second model's optimizer zeroed every iteration beside the first one's accumulation, and a
loop that backwards its cached batches only right before the step:
nothing to report."""

import torch


def train(model, loader, optimizer, scaler, accum):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = model(x, y) / accum
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


def train_every(model, loader, optimizer, scaler):
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def train_two(gen, disc, loader, opt_g, opt_d, scaler, accum):
    for i, x in enumerate(loader):
        opt_d.zero_grad()
        with torch.autocast("cuda"):
            d_loss = disc(x).mean()
        scaler.scale(d_loss).backward()
        scaler.step(opt_d)
        with torch.autocast("cuda"):
            g_loss = gen(x).mean() / accum
        scaler.scale(g_loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(opt_g)
            opt_g.zero_grad()
        scaler.update()


def train_cached(model, loader, optimizer, scaler, accum_freq):
    """One step per batch when ``accum_freq == 1``; otherwise the batches are cached with no
    gradient and the backward of all of them runs just before the step."""
    cached = []
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        if accum_freq == 1:
            with torch.autocast("cuda"):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            cached.append((x, y))
            if ((i + 1) % accum_freq) > 0:
                continue
            for cx, cy in cached:
                with torch.autocast("cuda"):
                    loss = model(cx, cy) / accum_freq
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            cached = []

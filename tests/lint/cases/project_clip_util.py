"""A project's own clip helper (``commons.clip_grad_value_``, as VITS-family code has) is a
clip: with a limit after a scaled backward and no unscale_ it clips scaled gradients
(AMP001); with a limit of None it only measures the norm for the log and is no clip, so it
is not "a clip after the step" (no AMP016)."""

import commons
import torch


def train(model, disc, optim_g, optim_d, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss_g = model(x, y)
        optim_g.zero_grad()
        scaler.scale(loss_g).backward()
        commons.clip_grad_value_(model.parameters(), 1.0)  # expect: AMP001
        scaler.step(optim_g)
        norm_d = commons.clip_grad_value_(disc.parameters(), None)
        with torch.autocast("cuda"):
            loss_d = disc(x, y)
        optim_d.zero_grad()
        scaler.scale(loss_d).backward()
        scaler.unscale_(optim_d)
        scaler.step(optim_d)
        scaler.update()
        print(norm_d)

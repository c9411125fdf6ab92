"""A clip object built from the config and called on the model, and a clipping function."""

import torch


class ClipGrad:
    def __init__(self, clip_type="norm", max_norm=35.0):
        self.clip_type = clip_type
        self.max_norm = max_norm

    def __call__(self, model):
        if self.clip_type == "norm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_norm)
        else:
            torch.nn.utils.clip_grad_value_(model.parameters(), self.max_norm)


def clip_all(model, limit):
    torch.nn.utils.clip_grad_norm_(model.parameters(), limit)


class Logger:
    def __call__(self, model):
        return sum(p.grad.norm() for p in model.parameters() if p.grad is not None)


def unscale_clip_step(scaler, optimizer, model, limit):
    """A whole step: it unscales before it clips, so its call is no clip while scaled."""
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
    scaler.step(optimizer)
    scaler.update()

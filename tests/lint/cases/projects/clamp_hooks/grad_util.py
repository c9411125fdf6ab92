"""Clipping by gradient hooks: each hook clamps a gradient while the backward computes it."""


def enable_gradient_clipping(model, limit):
    if limit is not None:
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.register_hook(lambda grad: clamp_tensor(grad, -limit, limit))


def clamp_tensor(tensor, low, high):
    return tensor.clamp(low, high)

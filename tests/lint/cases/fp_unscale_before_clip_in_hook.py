"""The fixed hook unscales first, then clips."""

from torch import nn


def install_hooks(model, optimizer, scaler):
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            def hook(tensor, group=group):
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(tensor, 1.0)
                scaler.step(optimizer)
                scaler.update()

            parameter.register_post_accumulate_grad_hook(hook)

"""A per-parameter gradient hook (a fused back pass): the clip comes before the scaler
unscales the gradient, so it clips the scaled one. The scaled backward is not in view; the
unscale after the clip is evidence enough."""

from torch import nn


def install_hooks(model, optimizer, scaler):
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            def hook(tensor, group=group):
                nn.utils.clip_grad_norm_(tensor, 1.0)  # expect: AMP001
                scaler.unscale_(optimizer)
                scaler.step(optimizer)
                scaler.update()

            parameter.register_post_accumulate_grad_hook(hook)

"""The one place ampkit calls torch's private AMP kernels.

``torch._amp_foreach_non_finite_check_and_unscale_`` is the fused kernel behind
``torch.amp.GradScaler.unscale_``: one pass over a list of gradients that multiplies them by
``inv_scale`` and sets ``found_inf`` when any value is inf or NaN. It has kept its signature
since torch 1.6; ``tests/test_kernels.py`` checks it against a plain-torch reference so a change
in a future release fails loudly here rather than silently in training. Where the kernel is
missing or unsafe (Apple MPS before torch 2.8, and MPS fp16/bf16 gradients:
:func:`ampkit.precision.devices.fused_unscale_supported`), :func:`unscale_plain_` does the
same with ordinary ops.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import torch

from ampkit.precision.devices import fused_unscale_supported

__all__ = ["unscale_and_check_", "unscale_plain_"]


def _grad_views(params: Iterable[torch.Tensor]) -> dict[torch.device, dict[torch.dtype, list]]:
    groups: dict[torch.device, dict[torch.dtype, list[torch.Tensor]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for param in params:
        grad = param.grad
        if grad is None:
            continue
        if hasattr(grad, "to_local"):  # FSDP2/DTensor: each rank checks its own shard;
            grad = grad.to_local()  # the scaler then reduces the flag over the ranks
        if grad.is_sparse:
            # Duplicate indices are summed by coalesce(); check the values that will be applied.
            if grad.dtype is torch.float16:
                param.grad = grad = grad.coalesce()
            grad = grad._values()
        groups[grad.device][grad.dtype].append(grad)
    return groups


@torch.no_grad()
def unscale_plain_(grads: list[torch.Tensor], flag: torch.Tensor, inv: torch.Tensor) -> None:
    """What the fused kernel does, with ordinary ops: ``grads *= inv`` (in fp32, cast back)
    and ``flag = 1.0`` when any gradient holds an inf or NaN. No host synchronisation."""
    for grad in grads:
        flag.copy_(torch.maximum(flag, (~torch.isfinite(grad)).any().to(flag.dtype)))
        grad.copy_(grad.float() * inv)


@torch.no_grad()
def unscale_and_check_(
    params: Iterable[torch.Tensor], inv_scale: float
) -> dict[torch.device, torch.Tensor]:
    """Multiply every ``param.grad`` by ``inv_scale`` in place and flag non-finite values.

    Returns one float32 tensor per gradient device, ``1.0`` where that device saw an inf/NaN.
    Nothing here synchronises with the GPU: the flags stay on their devices.
    """
    found: dict[torch.device, torch.Tensor] = {}
    for device, by_dtype in _grad_views(params).items():
        flag = torch.zeros((), dtype=torch.float32, device=device)
        inv = torch.full((), inv_scale, dtype=torch.float32, device=device)
        for dtype, grads in by_dtype.items():
            if fused_unscale_supported(device, dtype):
                torch._amp_foreach_non_finite_check_and_unscale_(grads, flag, inv)
            else:
                unscale_plain_(grads, flag, inv)
        found[device] = flag
    return found

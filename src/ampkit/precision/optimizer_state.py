"""Optimizer state loaded back in the dtypes it was saved in.

``torch.optim.Optimizer.load_state_dict`` casts every floating state tensor but ``step`` to its
parameter's dtype (a PyTorch behaviour since 2020): bf16 moments of fp32 parameters come back
fp32, fp32 state of bf16 parameters comes back bf16 (rounded: the run then continues from
other numbers than it saved). :func:`load_optimizer_state` loads as usual and then puts every
state tensor back in its saved dtype, with its saved bits::

    load_optimizer_state(optimizer, saved)                       # a full state dict
    load_optimizer_state(optimizer, saved, load=lambda sd: set_optimizer_state_dict(...))

Saved and current state are matched by position: the ``params`` of each saved param group
(ids, or the parameter names ``torch.distributed.checkpoint`` writes) in order, against the
optimizer's parameters in order, as ``load_state_dict`` itself matches them. Sharded
(``DTensor``) state is handled: a saved full tensor is split the way the current state is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["load_optimizer_state", "restore_state_dtypes", "saved_state"]


def _is_dtensor(t: torch.Tensor) -> bool:
    dtensor = getattr(getattr(torch.distributed, "tensor", None), "DTensor", None)
    return dtensor is not None and isinstance(t, dtensor)


def saved_state(
    optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
) -> list[tuple[torch.Tensor, Mapping[str, Any]]]:
    """``(parameter, its saved state)`` for each parameter of ``optimizer`` that has saved
    state in ``state_dict``, matched by position (module docstring)."""
    keys = [key for group in state_dict.get("param_groups", []) for key in group["params"]]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = state_dict.get("state", {})
    return [(p, state[k]) for k, p in zip(keys, params, strict=False) if state.get(k)]


def _exact(saved: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
    """``saved`` (its dtype, its bits) laid out as ``now``: on its device, as a DTensor of
    its mesh and placements when ``now`` is one."""
    if _is_dtensor(now) and not _is_dtensor(saved):
        from torch.distributed.tensor import distribute_tensor

        local = saved.detach().to(now.device)
        # every rank holds the full tensor: each keeps its own part, no communication
        return distribute_tensor(
            local,
            now.device_mesh,  # type: ignore[attr-defined]
            now.placements,  # type: ignore[attr-defined]
            src_data_rank=None,
        )
    return saved.detach().to(now.device, copy=True)


def restore_state_dtypes(optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]) -> int:
    """After ``load_state_dict``, put back every state tensor whose dtype the load changed,
    from ``state_dict`` (what was loaded). Returns how many tensors were put back."""
    fixed = 0
    for param, saved in saved_state(optimizer, state_dict):
        loaded = optimizer.state.get(param)
        if not loaded:
            continue
        for key, value in saved.items():
            now = loaded.get(key)
            if (
                torch.is_tensor(value)
                and torch.is_tensor(now)
                and value.dtype != now.dtype
                and value.shape == now.shape
            ):
                loaded[key] = _exact(value, now)
                fixed += 1
    return fixed


def load_optimizer_state(
    optimizer: torch.optim.Optimizer,
    state_dict: dict[str, Any],
    *,
    load: Callable[[Any], Any] | None = None,
) -> None:
    """Load ``state_dict`` into ``optimizer`` and keep every state tensor's saved dtype.

    Args:
        optimizer: the optimizer (a :class:`~ampkit.CompensatedOptimizer` too: it checks
            and keeps its own fp32 state, this keeps the rest).
        state_dict: the saved state (``optimizer.state_dict()``, or the one
            ``torch.distributed.checkpoint``'s ``get_optimizer_state_dict`` gives).
        load: how to load it (default ``optimizer.load_state_dict``); called with
            ``state_dict``.

    Raises:
        Whatever ``load`` raises (nothing is changed by this function then).
    """
    (load or optimizer.load_state_dict)(state_dict)
    restore_state_dtypes(optimizer, state_dict)

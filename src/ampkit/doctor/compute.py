"""How much of a model's compute a set of fp32 islands holds: the cost of a ``keep_fp32``
recommendation.

:func:`island_share` runs the closure once more (forward only, no grad) and counts the FLOPs of
every matmul, convolution and attention op (torch's own per-op formulas,
``torch.utils.flop_counter``), those run inside the island modules apart; it also counts the
parameters inside them. Elementwise ops are not counted: they are a small share of the compute
and autocast runs most of them in fp32 anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

__all__ = ["IslandShare", "island_share"]


@dataclass(frozen=True)
class IslandShare:
    """The part of one forward pass inside the fp32 islands.

    Attributes:
        flops, island_flops: matmul/convolution/attention FLOPs of the forward pass, all and
            inside the islands.
        params, island_params: parameters (elements), all and inside the islands.
    """

    flops: int
    island_flops: int
    params: int
    island_params: int

    @property
    def flops_share(self) -> float | None:
        """Share of the counted FLOPs inside the islands (None: no FLOPs counted)."""
        return self.island_flops / self.flops if self.flops else None

    @property
    def params_share(self) -> float | None:
        """Share of the parameters inside the islands (None: the model has none)."""
        return self.island_params / self.params if self.params else None

    @property
    def share(self) -> float:
        """The compute share: FLOPs when any were counted, else parameters."""
        flops = self.flops_share
        if flops is not None:
            return flops
        return self.params_share or 0.0


class _Counter(TorchDispatchMode):
    """Counts FLOPs per op; ``inside > 0`` while an island module runs."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.island = 0
        self.inside = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = flop_registry.get(func._overloadpacket)
        if count is not None:
            flops = int(count(*args, **kwargs, out_val=out))
            self.total += flops
            if self.inside:
                self.island += flops
        return out


def island_share(
    model: nn.Module, closure: Callable[[], object], islands: Sequence[str]
) -> IslandShare:
    """Count the forward pass of ``closure()`` and the parameters, inside ``islands`` apart.

    Run it where the model's state is preserved (:func:`~ampkit.doctor.isolation.preserved_state`):
    the forward pass updates running statistics and draws random numbers like any other.

    Args:
        model: the model.
        closure: runs the forward pass and returns the loss.
        islands: module names as in ``model.named_modules()`` (unknown names count nothing).
    """
    modules = dict(model.named_modules())
    chosen = [modules[name] for name in islands if name in modules]
    counter = _Counter()
    handles = []

    def enter(*_: object, **__: object) -> None:
        counter.inside += 1

    def leave(*_: object, **__: object) -> None:
        counter.inside -= 1

    try:
        for module in chosen:
            handles.append(module.register_forward_pre_hook(enter))
            handles.append(module.register_forward_hook(leave, always_call=True))
        with torch.no_grad(), counter:
            closure()
    finally:
        for handle in handles:
            handle.remove()
    kept: dict[int, nn.Parameter] = {}
    for module in chosen:
        kept.update({id(p): p for p in module.parameters()})
    everything = {id(p): p for p in model.parameters()}
    return IslandShare(
        flops=counter.total,
        island_flops=counter.island,
        params=sum(p.numel() for p in everything.values()),
        island_params=sum(p.numel() for p in kept.values()),
    )

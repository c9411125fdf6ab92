"""Pass-through modules: modules that forward their input's values and compute nothing of their
own, so a range problem seen at their output is their input's problem.

A module passes through when it has no parameters and either

* is one by type: :class:`~torch.nn.Identity`, :class:`~torch.nn.Flatten`,
  :class:`~torch.nn.Unflatten`, every dropout (``nn.Dropout``, ``Dropout1d/2d/3d``,
  ``AlphaDropout``, ``FeatureAlphaDropout`` and library classes named ``*Dropout*``), and
  stochastic depth (``DropPath``, ``DropBlock``, torchvision's ``StochasticDepth``), which keep
  or zero values and rescale the kept ones by the keep probability; or
* is one by measurement: over every call of the diagnosed steps, its outputs' largest magnitude
  is at most its inputs' and its outputs' smallest non-zero magnitude is at least its inputs'
  (``ReLU``, max pooling, slicing, reshaping): nothing it outputs can overflow or underflow a
  format its inputs fit.

The doctor moves a finding seen at such a module to the module that produced the values (see
:func:`producer`): the module whose output the pass-through module received, or, for a value
its parent computed inline (``x * gamma`` in a block's forward), that parent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch
from torch import nn

__all__ = ["magnitudes", "passes_through_by_type", "producer"]

_TYPES: tuple[type[nn.Module], ...] = (
    nn.Identity,
    nn.Flatten,
    nn.Unflatten,
    nn.modules.dropout._DropoutNd,
)
_NAMES = ("dropout", "droppath", "dropblock", "stochasticdepth")


def passes_through_by_type(module: nn.Module) -> bool:
    """Whether ``module`` is a pass-through module by its type (and has no parameters)."""
    if any(True for _ in module.parameters()):
        return False
    if isinstance(module, _TYPES):
        return True
    name = type(module).__name__.lower().replace("_", "")
    return any(part in name for part in _NAMES)


def magnitudes(tensors: Sequence[torch.Tensor]) -> tuple[float, float]:
    """``(largest finite magnitude, smallest non-zero finite magnitude)`` over ``tensors``
    (``(0, inf)`` when there is no such value); one host sync."""
    parts = []
    for t in tensors:
        x = t.detach().reshape(-1).float().abs()
        if x.numel() == 0:
            continue
        finite = torch.isfinite(x)
        zero = torch.zeros((), device=x.device)
        inf = torch.full((), torch.inf, device=x.device)
        largest = torch.where(finite, x, zero).max()
        smallest = torch.where(finite & (x > 0), x, inf).min()
        parts.append(torch.stack([largest, smallest]))
    if not parts:
        return 0.0, float("inf")
    values = torch.stack([p.to(parts[0].device) for p in parts]).double()
    return float(values[:, 0].max()), float(values[:, 1].min())


class _Traced(Protocol):
    @property
    def input_from(self) -> str | None: ...

    @property
    def passes_through(self) -> bool: ...


def producer(name: str, states: Mapping[str, _Traced]) -> str:
    """The module whose values pass-through module ``name`` forwarded: the module that made its
    input, skipping other pass-through modules on the way; ``""`` (the model) for the model's
    own inputs."""
    seen = {name}
    current = states[name].input_from
    while current is not None and current in states and states[current].passes_through:
        if current in seen:
            break
        seen.add(current)
        current = states[current].input_from
    return current if current is not None and current in states else ""

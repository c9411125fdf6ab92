"""Maps over nested containers of tensors (tuples, lists, dicts), the one walker ampkit uses.

Batches, model outputs and hook arguments are trees whose leaves may be tensors. These helpers
rebuild the same container types (a ``list`` stays a list, a named tuple stays a named tuple,
a ``dict`` subclass such as Hugging Face's ``ModelOutput`` keeps its class where it can be
rebuilt from its items) and leave every non-tensor leaf as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["floating_tensors", "iter_tensors", "map_tensors", "to_device", "to_fp32"]

_LOW = (torch.float16, torch.bfloat16)


def _rebuild_mapping(value: dict[Any, Any], items: dict[Any, Any]) -> Any:
    if type(value) is dict:
        return items
    try:
        return type(value)(**items) if hasattr(value, "to_tuple") else type(value)(items)
    except TypeError:
        return items


def map_tensors(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """``value`` with ``fn`` applied to every tensor inside it, containers rebuilt."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return _rebuild_mapping(value, {k: map_tensors(fn, v) for k, v in value.items()})
    if isinstance(value, list):
        return [map_tensors(fn, v) for v in value]
    if isinstance(value, tuple):
        items = [map_tensors(fn, v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def iter_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside ``value``, depth first, in container order."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            yield item
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))


def floating_tensors(value: Any) -> list[torch.Tensor]:
    """Every floating-point tensor inside ``value``."""
    return [t for t in iter_tensors(value) if t.is_floating_point()]


def to_fp32(value: Any) -> Any:
    """``value`` with every fp16/bf16 tensor inside cast to fp32 (other tensors unchanged)."""
    return map_tensors(lambda t: t.float() if t.dtype in _LOW else t, value)


def to_device(batch: Any, device: torch.device | str, channels_last: bool = False) -> Any:
    """Move every tensor in a (nested) batch to ``device``; non-blocking from pinned memory.

    With ``channels_last``, 4-D floating-point tensors (images) get that memory format.
    """
    target = torch.device(device)

    def move(tensor: torch.Tensor) -> torch.Tensor:
        moved = tensor.to(target, non_blocking=tensor.is_pinned())
        if channels_last and moved.dim() == 4 and moved.is_floating_point():
            moved = moved.contiguous(memory_format=torch.channels_last)
        return moved

    return map_tensors(move, batch)

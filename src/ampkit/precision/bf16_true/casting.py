"""Cast a model to pure bf16, keeping the modules that need fp32 in fp32.

By default the modules kept in fp32 are every embedding (``nn.Embedding``,
``nn.EmbeddingBag``), every normalisation layer (LayerNorm, RMSNorm, GroupNorm, BatchNorm,
InstanceNorm) and the final projection: the last ``nn.Linear`` the model registers (a
language model's head, a classifier). Embedding rows see sparse, small updates, norms hold
gains near 1 where bf16's ulp is 2**-7, and the head's logits feed the loss directly.
Tied parameters stay fp32 if any module that owns them is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ampkit.errors import ConfigurationError

__all__ = ["NORM_TYPES", "default_keep_fp32", "to_bf16_true"]

#: Normalisation layers kept in fp32 by default.
NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)


def default_keep_fp32(model: nn.Module) -> list[str]:
    """Names of the modules :func:`to_bf16_true` keeps in fp32 by default (see module doc)."""
    kept = [
        name
        for name, module in model.named_modules()
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag, *NORM_TYPES))
    ]
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    if linears and linears[-1] not in kept:
        kept.append(linears[-1])
    return kept


def _resolve(model: nn.Module, keep: Sequence[str | type[nn.Module]]) -> list[str]:
    modules = dict(model.named_modules())
    names: list[str] = []
    for item in keep:
        if isinstance(item, type) and issubclass(item, nn.Module):
            names += [n for n, m in modules.items() if isinstance(m, item)]
        elif isinstance(item, str) and item in modules:
            names.append(item)
        else:
            shown = [n for n in modules if n][:8]
            raise ConfigurationError(
                f"bf16_true_keep_fp32: {item!r} is neither a module name of the model nor an "
                f"nn.Module type. Module names look like {', '.join(shown)}; pass names, types, "
                "or () to cast everything."
            )
    return names


def to_bf16_true(
    model: nn.Module, keep_fp32: Sequence[str | type[nn.Module]] | None = None
) -> list[str]:
    """Cast ``model``'s floating parameters and buffers to bf16 in place, except kept modules.

    Parameter objects stay the same (only ``.data`` changes), so an optimizer built before
    the cast still holds them.

    Args:
        model: the model, in fp32 (or built in bf16: kept modules are then cast up to fp32).
        keep_fp32: module names or types to keep in fp32 (with their submodules); None keeps
            :func:`default_keep_fp32`, ``()`` casts everything.

    Returns:
        The names of the modules kept in fp32.

    Raises:
        ConfigurationError: a name in ``keep_fp32`` is not a module of ``model``.
    """
    kept = default_keep_fp32(model) if keep_fp32 is None else _resolve(model, keep_fp32)
    prefixes = tuple(f"{n}." for n in kept if n)
    keep_all = "" in kept
    fp32_tensors: set[int] = set()
    for name, module in model.named_modules():
        if keep_all or name in kept or name.startswith(prefixes):
            fp32_tensors.update(id(t) for t in module.parameters(recurse=False))
            fp32_tensors.update(id(t) for t in module.buffers(recurse=False))
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if not tensor.is_floating_point():
                continue
            if id(tensor) not in fp32_tensors:
                tensor.data = tensor.data.to(torch.bfloat16)
            elif tensor.dtype == torch.bfloat16:
                # built in bf16 (a bf16 default dtype while the model was made): the islands
                # are fp32 from here on, starting from the bf16-rounded initial values
                tensor.data = tensor.data.to(torch.float32)
    return kept

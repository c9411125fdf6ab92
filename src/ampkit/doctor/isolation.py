"""The doctor never changes the model it diagnoses.

:func:`preserved_state` wraps a diagnosis: the model's key/value caches are switched off
(``config.use_cache = False`` on every submodule that has a config, as Hugging Face models do),
and on exit the buffers (BatchNorm statistics included), the gradients, every module's
train/eval mode, ``use_cache`` and the global RNG streams are put back exactly as they were.

:func:`isolated_copy` gives the per-module low-precision re-run its own copy of the call's
arguments: tensors cloned, and objects that hold state (a cache passed as ``past_key_values``)
copied down to their tensors, so the re-run cannot write into what the real forward reads.
"""

from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ampkit.precision.devices import fork_rng

__all__ = ["isolated_copy", "preserved_state"]

_ATOMS = (
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
    torch.dtype,
    torch.device,
    torch.Size,
    torch.Generator,
    nn.Module,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
)


def isolated_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """A copy of ``value`` that shares no tensor and no stateful object with it.

    Tensors are detached and cloned; lists, tuples (named ones too) and dicts are rebuilt;
    other objects with a ``__dict__`` are shallow-copied with their attributes copied the same
    way. Modules, functions, classes and scalars are shared (they are not state the re-run
    could write). Shared references stay shared inside the copy.
    """
    memo = {} if memo is None else memo
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, torch.Tensor):
        result: Any = value.detach().clone()
    elif isinstance(value, _ATOMS):
        result = value
    elif isinstance(value, list):
        result = [isolated_copy(v, memo) for v in value]
    elif isinstance(value, tuple):
        items = [isolated_copy(v, memo) for v in value]
        if type(value) is tuple:
            result = tuple(items)
        elif hasattr(value, "_fields"):
            result = type(value)(*items)
        else:
            try:
                result = type(value)(items)
            except TypeError:
                result = tuple(items)
    elif isinstance(value, dict):
        result = copy.copy(value)
        memo[key] = result
        for k, v in value.items():
            result[k] = isolated_copy(v, memo)
    elif hasattr(value, "__dict__"):
        result = copy.copy(value)
        if result is value:  # a singleton (an enum member): nothing to isolate
            return value
        memo[key] = result
        for name, attr in vars(value).items():
            setattr(result, name, isolated_copy(attr, memo))
    else:
        result = value
    memo[key] = result
    return result


def _cache_configs(model: nn.Module) -> list[Any]:
    configs: dict[int, Any] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and getattr(config, "use_cache", None) is True:
            configs[id(config)] = config
    return list(configs.values())


@contextlib.contextmanager
def preserved_state(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Run a diagnosis without leaving a trace on ``model`` or the global RNG.

    Inside: ``use_cache`` is False on every config of the model's modules. On exit (error or
    not): buffers copied back in place, gradients and train/eval modes restored, ``use_cache``
    restored, and the CPU and device RNG states as they were on entry.
    """
    buffers = [b.detach().clone() for b in model.buffers()]
    params = list(model.parameters())
    grads = [p.grad for p in params]
    modes = [(m, m.training) for m in model.modules()]
    configs = _cache_configs(model)
    with fork_rng(device):
        try:
            for config in configs:
                config.use_cache = False
            yield
        finally:
            for config in configs:
                config.use_cache = True
            for module, training in modes:
                module.training = training
            for p, g in zip(params, grads, strict=True):
                p.grad = g
            with torch.no_grad():
                for b, saved in zip(model.buffers(), buffers, strict=True):
                    b.copy_(saved)

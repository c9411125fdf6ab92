"""Run chosen modules in fp32 inside an autocast region ("fp32 islands").

>>> islands = keep_fp32(model, ["head", torch.nn.LayerNorm])
>>> with torch.autocast("cpu", dtype=torch.bfloat16):
...     logits = model(x)          # head and every LayerNorm compute in fp32
>>> islands.remove()               # back to plain autocast

Each matched module gets a forward pre-hook that, when autocast is on for the device of its
inputs, casts its fp16/bf16 floating inputs to fp32 and enters
``torch.autocast(device_type, enabled=False)``, and a forward hook (``always_call=True``, so it
runs even when the module raises) that leaves that region again. Parameters are untouched: under
autocast they are fp32 already. The module's output stays fp32; autocast casts it down again
where the next low-precision op needs it.

With :class:`~ampkit.MixedPrecision`, apply the islands to the model once, before the loop; the
engine's ``mp.autocast()`` region then skips them::

    islands = ampkit.keep_fp32(model, report.recommendation.keep_fp32)
    with ampkit.MixedPrecision("bf16") as mp:
        with mp.autocast():
            loss = loss_fn(model(x), y)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from ampkit._tree import to_fp32
from ampkit.errors import ConfigurationError

__all__ = ["Fp32Islands", "keep_fp32", "select_modules"]


def _first_device_type(module: nn.Module, values: Iterable[Any]) -> str:
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.device.type
    for tensor in module.parameters():
        return tensor.device.type
    return "cpu"


class Fp32Islands:
    """The hooks :func:`keep_fp32` installed; ``remove()`` (or leaving ``with``) undoes them.

    Attributes:
        modules: names (as in ``named_modules()``) of the modules that run in fp32.
    """

    def __init__(self, modules: Sequence[tuple[str, nn.Module]]) -> None:
        self.modules: tuple[str, ...] = tuple(name for name, _ in modules)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        for _, module in modules:
            regions: list[torch.autocast | None] = []
            self._handles.append(
                module.register_forward_pre_hook(self._enter(regions), with_kwargs=True)
            )
            self._handles.append(
                module.register_forward_hook(self._leave(regions), always_call=True)
            )

    @staticmethod
    def _enter(regions: list[torch.autocast | None]) -> Any:
        def pre_hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
            device_type = _first_device_type(module, [*args, *kwargs.values()])
            if not torch.is_autocast_enabled(device_type):
                regions.append(None)
                return None
            region = torch.autocast(device_type, enabled=False)
            region.__enter__()
            regions.append(region)
            return to_fp32(args), to_fp32(kwargs)

        return pre_hook

    @staticmethod
    def _leave(regions: list[torch.autocast | None]) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if regions:
                region = regions.pop()
                if region is not None:
                    region.__exit__(None, None, None)

        return hook

    def remove(self) -> None:
        """Remove the hooks; the modules follow the surrounding autocast again (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> Fp32Islands:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"Fp32Islands(modules={list(self.modules)!r})"


def keep_fp32(model: nn.Module, targets: Iterable[str | type[nn.Module]]) -> Fp32Islands:
    """Make the named modules, and modules of the given types, compute in fp32 under autocast.

    Args:
        model: the model; it is changed only by adding hooks.
        targets: module names exactly as ``model.named_modules()`` spells them (``"head"``,
            ``"blocks.0.mlp"``), and/or ``nn.Module`` subclasses (``nn.LayerNorm``).

    Returns:
        The installed hooks; call ``.remove()`` or use the result as a context manager.

    Raises:
        ConfigurationError: a name is not a module of ``model`` (with a did-you-mean), a type
            matches no module, or a target is neither a string nor an ``nn.Module`` subclass.
    """
    return Fp32Islands(select_modules(model, targets, "keep_fp32"))


def select_modules(
    model: nn.Module,
    targets: Iterable[str | type[nn.Module]],
    argument: str,
    *,
    check_named: Callable[[str, nn.Module], None] | None = None,
) -> list[tuple[str, nn.Module]]:
    """The modules of ``model`` that ``targets`` choose, as ``(name, module)`` in
    ``named_modules`` order: names exactly as ``model.named_modules()`` spells them, and
    ``nn.Module`` subclasses (every module of that type). The one resolver of module targets
    (``keep_fp32``, ``activation_checkpointing``).

    Args:
        argument: the argument named in errors.
        check_named: called with each module chosen by name, to refuse it (raise).

    Raises:
        ConfigurationError: a name is not a module of ``model`` (with a did-you-mean), a type
            matches no module, or a target is neither a string nor an ``nn.Module`` subclass.
    """
    named = dict(model.named_modules())
    chosen: dict[str, nn.Module] = {}
    for target in targets:
        if isinstance(target, str):
            if target not in named:
                guess = difflib.get_close_matches(target, [n for n in named if n], n=1)
                hint = f" Did you mean {guess[0]!r}?" if guess else ""
                raise ConfigurationError(
                    f"{argument}: {target!r} is not a module of {type(model).__name__}.{hint} "
                    "Use names as model.named_modules() spells them.",
                    argument=argument,
                )
            if check_named is not None:
                check_named(target, named[target])
            chosen[target] = named[target]
        elif isinstance(target, type) and issubclass(target, nn.Module):
            hits = {n: m for n, m in named.items() if isinstance(m, target)}
            if not hits:
                raise ConfigurationError(
                    f"{argument}: no module of {type(model).__name__} is a {target.__name__}. "
                    "Pass module types the model contains, or module names.",
                    argument=argument,
                )
            chosen.update(hits)
        else:
            raise ConfigurationError(
                f"{argument}: {target!r} is neither a module name nor an nn.Module subclass. "
                "Pass names such as 'head' or types such as nn.LayerNorm.",
                argument=argument,
            )
    order = list(named)
    return sorted(chosen.items(), key=lambda item: order.index(item[0]))

"""Observe every module's forward and backward without changing what it computes.

:func:`observe` installs, on every module of a model, a forward pre-hook and a forward hook
(both with keyword arguments) and, on every parameter, a gradient hook; it removes them all when
the ``with`` block ends, error or not. Backward is observed with *tensor* hooks registered on
each call's outputs and inputs, not with ``register_full_backward_hook``, which rejects modules
that work in place (``nn.ReLU(inplace=True)``).

For one module call the observer sees, in this order: its arguments (pre-hook), its arguments
and output (forward hook); later, during backward, the gradient of each output, then the gradient
of each input and of its parameters. Children's forward hooks run before their parent's, so a
child's gradient hooks on a shared tensor also run before the parent's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import nn

__all__ = ["ModuleObserver", "observe", "on_grad"]


def on_grad(tensors: list[torch.Tensor], callback: Callable[[torch.Tensor], None]) -> None:
    """Call ``callback(grad)`` when autograd computes the gradient of each tensor that needs one."""

    def hook(grad: torch.Tensor) -> None:
        callback(grad)

    for tensor in tensors:
        if tensor.requires_grad:
            tensor.register_hook(hook)


class ModuleObserver(Protocol):
    """What :func:`observe` calls. Names are as in ``model.named_modules()``."""

    def before_forward(
        self, name: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A module is about to run on ``args`` and ``kwargs``."""

    def after_forward(
        self,
        name: str,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
    ) -> None:
        """A module returned ``output``."""

    def param_grad(self, name: str, module: nn.Module, grad: torch.Tensor) -> None:
        """The gradient of one of the module's own parameters was computed."""


@contextlib.contextmanager
def observe(model: nn.Module, observer: ModuleObserver, *, params: bool = True) -> Iterator[None]:
    """Hook every module of ``model`` (and its parameters) to ``observer`` for a ``with`` block.

    Args:
        model: the model; only hooks are added, and all are removed on exit.
        observer: receives the events.
        params: also observe parameter gradients.
    """
    handles: list[Any] = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(_pre(observer, name), with_kwargs=True))
            handles.append(module.register_forward_hook(_post(observer, name), with_kwargs=True))
            if params:
                for param in module.parameters(recurse=False):
                    if param.requires_grad:
                        handles.append(param.register_hook(_param(observer, name, module)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _pre(observer: ModuleObserver, name: str) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        observer.before_forward(name, module, args, kwargs)

    return hook


def _post(observer: ModuleObserver, name: str) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        observer.after_forward(name, module, args, kwargs, output)

    return hook


def _param(observer: ModuleObserver, name: str, module: nn.Module) -> Callable[..., None]:
    def hook(grad: torch.Tensor) -> None:
        observer.param_grad(name, module, grad)

    return hook

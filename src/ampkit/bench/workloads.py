"""What ``ampkit bench`` trains: a :class:`~ampkit.models.built.BuiltModel`, read step by step.

``--model`` strings are resolved by :func:`ampkit.models.resolve.build_model` (``gpt``,
``convnet``, ``hf:<name>``, ``timm:<name>``, ``package.module:factory``; a factory may return a
``BuiltModel`` for full control). A :class:`Workload` is only the benchmark's view of it: every
batch as ``(inputs, targets)`` and the loss as ``loss(model, inputs, targets)``. Every variant of
one benchmark trains its own deep copy of the same initial weights on the same batches, so
losses are comparable step by step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ampkit.models.built import BuiltModel
from ampkit.models.builtin import ConvNet, convnet_model, gpt_model
from ampkit.models.resolve import build_model

__all__ = ["ConvNet", "Workload", "convnet_workload", "gpt_workload", "load_workload"]

Batch = tuple[Any, Any]


@dataclass(frozen=True)
class Workload:
    """The benchmark's view of a :class:`~ampkit.models.built.BuiltModel`.

    ``batch(step)`` is ``(inputs, targets)``: the built model's batch when it has a
    ``loss_fn`` or is a pair (the built-in GPT's ``(idx, targets)``, which the model turns into
    its loss), else ``(whole batch, None)`` (a dict the model consumes). Everything else is
    read from ``built``.

    Attributes:
        built: the model, its batches and what one step is.
    """

    built: BuiltModel
    _pairs: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        first = self.built.example_batch
        pairs = self.built.loss_fn is not None or (
            isinstance(first, (tuple, list)) and len(first) == 2
        )
        object.__setattr__(self, "_pairs", pairs)

    @property
    def name(self) -> str:
        """The spec the model was built from."""
        return self.built.name

    @property
    def model(self) -> nn.Module:
        """The fp32 model on the CPU (each variant trains a deep copy)."""
        return self.built.model

    @property
    def items_per_step(self) -> int:
        """Samples or tokens one step processes."""
        return self.built.items_per_step

    @property
    def unit(self) -> str:
        """What :attr:`items_per_step` counts."""
        return self.built.unit

    @property
    def description(self) -> str:
        """One line on the model's shape."""
        return self.built.description

    @property
    def flops_per_step(self) -> float | None:
        """Model FLOPs of one step in closed form, or None (the bench counts them)."""
        return self.built.flops_per_step

    @property
    def make_optimizer(self) -> Callable[[nn.Module], torch.optim.Optimizer]:
        """Builds each variant's optimizer."""
        return self.built.make_optimizer

    def batch(self, step: int) -> Batch:
        """``(inputs, targets)`` of ``step`` on the CPU (targets None when the model computes
        its loss from the batch)."""
        made = self.built.batch(step)
        return (made[0], made[1]) if self._pairs else (made, None)

    def loss(
        self, model: nn.Module | Callable[..., Any], inputs: Any, targets: Any
    ) -> torch.Tensor:
        """The loss of ``(inputs, targets)`` from :meth:`batch` for ``model`` (or a copy)."""
        return self.built.loss(model, (inputs, targets) if self._pairs else inputs)


def gpt_workload(
    batch_size: int | None = None, seq_len: int | None = None, **shape: int
) -> Workload:
    """The built-in GPT (:func:`ampkit.models.builtin.gpt_model`; ``n_layer``, ``n_head``,
    ``n_embd``, ``seed`` as keywords) as a :class:`Workload`.

    Raises:
        DataError: the built-in corpus cannot be read.
    """
    if seq_len is not None:
        shape["seq_len"] = seq_len
    return Workload(gpt_model(batch_size, **shape))


def convnet_workload(
    batch_size: int | None = None, image_size: int = 32, *, seed: int = 0
) -> Workload:
    """:class:`ConvNet` on random labelled images (:func:`ampkit.models.builtin.convnet_model`)."""
    return Workload(convnet_model(batch_size, image_size, seed=seed))


def load_workload(
    spec: str | BuiltModel | Workload,
    batch_size: int | None = None,
    *,
    allow_large: bool = False,
) -> Workload:
    """The :class:`Workload` of ``--model``: a string is resolved by
    :func:`ampkit.models.resolve.build_model` (``batch_size``, None for the model's default,
    reaches built-ins, library models and factories that take ``batch_size``; ``allow_large``
    lets an ``hf:`` model past the size limit of :mod:`ampkit.models.size`).

    Raises:
        ConfigurationError: unknown name, unimportable module, missing or non-callable
            factory, or a factory that returns something unusable.
        MissingDependencyError: ``hf:``/``timm:`` without the library installed.
    """
    if isinstance(spec, Workload):
        return spec
    if isinstance(spec, BuiltModel):
        return Workload(spec)
    return Workload(build_model(spec, batch_size=batch_size, allow_large=allow_large))

"""What ``ampkit bench`` trains: the built-in GPT, a small conv net, a library model or yours.

A :class:`Workload` is a model, a deterministic batch for every step, a loss and the unit its
throughput is counted in. Every variant of one benchmark trains its own deep copy of the
same initial weights on the same batches, so losses are comparable step by step.

``--model`` strings are resolved by :func:`ampkit.models.resolve.build_model` (``gpt``, ``convnet``,
``hf:<name>``, ``timm:<name>``, ``package.module:factory``); a factory may also return a
:class:`Workload` for full control.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError
from ampkit.models.resolve import BuiltModel, ConvNet, convnet_model, gpt_model
from ampkit.models.resolve import build_model as _build_model
from ampkit.models.resolve import call_factory as _call_factory
from ampkit.models.resolve import from_factory_result as _from_factory_result

__all__ = [
    "ConvNet",
    "Workload",
    "convnet_workload",
    "gpt_workload",
    "load_workload",
    "workload_from_built",
]

Batch = tuple[Any, Any]


def _default_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


@dataclass
class Workload:
    """One model and its data, as the benchmark needs them.

    Required (in this order, or by keyword):
        name: shown in the report (``gpt``, ``hf:gpt2``, ``mypkg.models:build``).
        model: the model, on the CPU, in fp32; each variant trains a deep copy.
        batch: ``batch(step)`` -> ``(inputs, targets)`` on the CPU, the same for a given step.
            Either may be a tensor or a tuple/list/dict of tensors (moved to the device as a
            whole); ``targets`` may be None when ``loss`` needs none.
        loss: ``loss(model, inputs, targets)`` -> scalar loss tensor.
        items_per_step: samples (or tokens) one step processes, for the throughput column.

    Optional:
        unit: what ``items_per_step`` counts: ``"samples"`` (default) or ``"tokens"``.
        make_optimizer: builds each variant's optimizer (default AdamW, lr 1e-3).
        description: one line on the model's shape, for the report.
        flops_per_step: model FLOPs of one training step (forward + backward) when known in
            closed form; None lets the benchmark count them with ``FlopCounterMode``.

    Raises:
        ConfigurationError: a field has the wrong type (the message names it).
    """

    name: str
    model: nn.Module
    batch: Callable[[int], Batch]
    loss: Callable[[nn.Module, Any, Any], torch.Tensor]
    items_per_step: int
    unit: str = "samples"
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] = field(default=_default_optimizer)
    description: str = ""
    flops_per_step: float | None = None

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be {rule}"
            for name, ok, rule in [
                ("name", isinstance(self.name, str) and bool(self.name), "a non-empty string"),
                ("model", isinstance(self.model, nn.Module), "a torch.nn.Module"),
                ("batch", callable(self.batch), "a function step -> (inputs, targets)"),
                ("loss", callable(self.loss), "a function (model, inputs, targets) -> loss"),
                (
                    "items_per_step",
                    isinstance(self.items_per_step, int)
                    and not isinstance(self.items_per_step, bool)
                    and self.items_per_step >= 1,
                    "an integer >= 1",
                ),
                ("unit", self.unit in ("samples", "tokens"), "'samples' or 'tokens'"),
                ("make_optimizer", callable(self.make_optimizer), "a function model -> optimizer"),
            ]
            if not ok
        ]
        if problems:
            raise ConfigurationError(
                "Workload: " + "; ".join(problems) + ". Required fields: name, model, batch, "
                "loss, items_per_step (see docs/bench.md)."
            )


def workload_from_built(built: BuiltModel) -> Workload:
    """The :class:`Workload` of a :class:`~ampkit.models.resolve.BuiltModel`.

    With a ``loss_fn`` its batches already are ``(inputs, targets)``; otherwise the model
    consumes the whole batch, which is passed as ``inputs`` (targets None).
    """
    if built.loss_fn is not None:
        batch: Callable[[int], Batch] = built.batch

        def loss(m: nn.Module, inputs: Any, targets: Any) -> torch.Tensor:
            return built.loss(m, (inputs, targets))

    else:

        def batch(step: int) -> Batch:
            return built.batch(step), None

        def loss(m: nn.Module, inputs: Any, targets: Any) -> torch.Tensor:
            return built.loss(m, inputs)

    return Workload(
        name=built.name,
        model=built.model,
        batch=batch,
        loss=loss,
        items_per_step=built.items_per_step,
        unit=built.unit,
        description=built.description,
        flops_per_step=built.flops_per_step,
    )


def gpt_workload(
    batch_size: int = 16,
    seq_len: int = 128,
    *,
    n_layer: int = 2,
    n_head: int = 4,
    n_embd: int = 128,
    seed: int = 0,
) -> Workload:
    """The built-in GPT (``ampkit train``'s model) on the standard-library byte corpus.

    Raises:
        DataError: the built-in corpus cannot be read.
    """
    from ampkit.bench.flops import gpt_train_flops

    built = gpt_model(batch_size, seq_len, n_layer=n_layer, n_head=n_head, n_embd=n_embd, seed=seed)
    workload = workload_from_built(built)
    workload.batch = built.batch
    workload.loss = lambda m, x, y: m(x, y)[1]
    workload.make_optimizer = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
    workload.flops_per_step = gpt_train_flops(built.model, batch_size, seq_len)
    return workload


def convnet_workload(batch_size: int = 32, image_size: int = 32, *, seed: int = 0) -> Workload:
    """:class:`ConvNet` on random 3-channel images with a fixed labelling rule per step."""
    return workload_from_built(convnet_model(batch_size, image_size, seed=seed))


def load_workload(spec: str, batch_size: int | None = None) -> Workload:
    """Resolve ``--model`` with :func:`ampkit.models.resolve.build_model`; a factory may also
    return a :class:`Workload`, used as is.

    ``batch_size`` (None: the workload's default) is passed to a factory that takes a
    ``batch_size`` parameter.

    Raises:
        ConfigurationError: unknown name, unimportable module, missing or non-callable
            factory, or a factory that returns something unusable.
        MissingDependencyError: ``hf:``/``timm:`` without the library installed.
    """
    if spec == "gpt":
        return gpt_workload() if batch_size is None else gpt_workload(batch_size)
    if spec == "convnet":
        return convnet_workload() if batch_size is None else convnet_workload(batch_size)
    prefix = spec.partition(":")[0]
    if prefix in ("hf", "timm") or ":" not in spec:
        return workload_from_built(_build_model(spec, batch_size=batch_size))
    made = _call_factory(spec, batch_size)
    if isinstance(made, Workload):
        return made
    return workload_from_built(_from_factory_result(spec, made))

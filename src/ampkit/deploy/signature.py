"""What goes into and comes out of an exported model: flat, named tensors.

Exporters and runtimes see a model as a list of input tensors and a list of output tensors;
PyTorch models take positional and keyword arguments and return tensors, tuples or dicts
(Hugging Face ``ModelOutput`` is a dict). :class:`Signature` fixes one flat order and one name
per tensor, :class:`FlatModel` is the model seen through it (the module that is exported), and
:func:`random_batches` makes parity batches shaped like the example inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError

__all__ = ["FlatModel", "Signature", "flatten_outputs", "random_batches", "resolve_signature"]


@dataclass(frozen=True)
class Signature:
    """The flat inputs of a model call.

    Attributes:
        positional: how many of ``inputs`` are positional arguments (the rest are keywords).
        keywords: the keyword names, in order, of the inputs after the positional ones.
        names: one name per input tensor (the forward's parameter names where known).
        inputs: the example input tensors, positional first.
    """

    positional: int
    keywords: tuple[str, ...]
    names: tuple[str, ...]
    inputs: tuple[torch.Tensor, ...]

    def call_args(
        self, flat: Sequence[torch.Tensor]
    ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        """Split flat tensors back into ``(args, kwargs)`` for the original model."""
        return tuple(flat[: self.positional]), dict(
            zip(self.keywords, flat[self.positional :], strict=True)
        )


def _parameter_names(model: nn.Module, count: int) -> list[str]:
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    return [names[i] if i < len(names) else f"input_{i}" for i in range(count)]


def resolve_signature(model: nn.Module, example_inputs: Any) -> Signature:
    """Normalise ``example_inputs`` (a tensor, a tuple/list of tensors, or a dict of keyword
    tensors) into a :class:`Signature`.

    Raises:
        ConfigurationError: an input is not a tensor, or there are none.
    """
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    if isinstance(example_inputs, torch.Tensor):
        args, kwargs = (example_inputs,), {}
    elif isinstance(example_inputs, (tuple, list)):
        args, kwargs = tuple(example_inputs), {}
    elif isinstance(example_inputs, Mapping):
        args, kwargs = (), dict(example_inputs)
    else:
        raise ConfigurationError(
            f"example_inputs: got a {type(example_inputs).__name__}. Pass a tensor, a tuple of "
            "tensors (positional arguments) or a dict of tensors (keyword arguments)."
        )
    names = [*_parameter_names(model, len(args)), *(str(k) for k in kwargs)]
    flat = [*args, *kwargs.values()]
    if not flat:
        raise ConfigurationError(
            "example_inputs: no tensors. Pass at least one example input of the model."
        )
    for name, value in zip(names, flat, strict=True):
        if not isinstance(value, torch.Tensor):
            raise ConfigurationError(
                f"example_inputs: {name!r} is a {type(value).__name__}, not a tensor. Exported "
                "models take tensors only; bind other arguments in a wrapper module."
            )
    return Signature(
        positional=len(args),
        keywords=tuple(str(k) for k in kwargs),
        names=tuple(names),
        inputs=tuple(t.detach().cpu() for t in flat),
    )


def flatten_outputs(output: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for every tensor in a model output, in a fixed order.

    A plain tensor is named ``output``; tuple items ``output_0``, ``output_1``; dict items
    (and ``ModelOutput`` fields) by key; nested values join names with ``.``. ``None`` and
    other non-tensors are dropped, as exporters drop them.
    """
    if isinstance(output, torch.Tensor):
        return [(prefix or "output", output)]
    found: list[tuple[str, torch.Tensor]] = []
    if isinstance(output, Mapping):
        for key, value in output.items():
            found += flatten_outputs(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(output, (tuple, list)):
        for i, value in enumerate(output):
            found += flatten_outputs(value, f"{prefix}.{i}" if prefix else f"output_{i}")
    return found


class FlatModel(nn.Module):
    """``model`` called with flat positional tensors, returning a flat tuple of tensors.

    The wrapped model is the ``model`` attribute, so module paths inside the export are
    ``model.<name>``.
    """

    def __init__(self, model: nn.Module, signature: Signature) -> None:
        super().__init__()
        self.model = model
        self.signature = signature

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args, kwargs = self.signature.call_args(flat)
        return tuple(t for _, t in flatten_outputs(self.model(*args, **kwargs)))


def random_batches(
    signature: Signature, count: int, seed: int = 0
) -> list[tuple[torch.Tensor, ...]]:
    """``count`` batches shaped like the example inputs, drawn to look like them.

    Floating inputs are normal with the example's mean and standard deviation; integer inputs
    (token ids, labels) are uniform over the example's ``[min, max]``; boolean inputs and
    constant integer inputs (attention masks of ones) are copied.
    """
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        batch = []
        for t in signature.inputs:
            if t.is_floating_point():
                std = float(t.float().std()) if t.numel() > 1 else 1.0
                noise = torch.randn(t.shape, generator=generator)
                batch.append((noise * std + float(t.float().mean())).to(t.dtype))
            elif t.dtype == torch.bool or t.numel() == 0 or int(t.min()) == int(t.max()):
                batch.append(t.clone())
            else:
                low, high = int(t.min()), int(t.max())
                batch.append(torch.randint(low, high + 1, t.shape, generator=generator).to(t.dtype))
        batches.append(tuple(batch))
    return batches

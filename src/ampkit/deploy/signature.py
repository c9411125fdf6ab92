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

__all__ = [
    "FlatModel",
    "Signature",
    "flatten_outputs",
    "is_mask_name",
    "padding_positions",
    "random_batches",
    "resolve_signature",
]


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
    for name, value in zip(names, flat, strict=True):
        _check_mask(name, value)
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


def is_mask_name(name: str) -> bool:
    """Whether an input of this name is a padding mask (``attention_mask``,
    ``decoder_attention_mask``, ...): 1 at real tokens, 0 at padding."""
    return name.endswith("attention_mask")


def _check_mask(name: str, value: torch.Tensor) -> None:
    """Refuse an integer padding mask holding other values than 0 and 1."""
    if not is_mask_name(name) or value.is_floating_point() or value.dtype == torch.bool:
        return
    if value.numel() and not bool(((value == 0) | (value == 1)).all()):
        seen = sorted({int(v) for v in value.unique()[:6]})
        raise ConfigurationError(
            f"example_inputs: {name!r} holds values {seen} but a padding mask is 1 at tokens "
            "and 0 at padding (as tokenizers return it). Pass the tokenizer's mask; an "
            "additive float mask is passed as a floating-point tensor."
        )


def _copied(name: str, t: torch.Tensor) -> bool:
    return (
        is_mask_name(name)
        or name == "position_ids"
        or t.dtype == torch.bool
        or t.numel() == 0
        or (not t.is_floating_point() and int(t.min()) == int(t.max()))
    )


def random_batches(
    signature: Signature, count: int, seed: int = 0
) -> list[tuple[torch.Tensor, ...]]:
    """``count`` batches shaped like the example inputs, drawn to look like them.

    Floating inputs are normal with the example's mean and standard deviation; integer inputs
    (token ids, labels) are uniform over the example's ``[min, max]``; padding masks
    (``*attention_mask``), ``position_ids``, boolean inputs and constant integer inputs are
    copied, so the padding of the examples is the padding of every batch. Where a padding mask
    is 0, integer inputs of its shape keep the example's values (the pad tokens): a model that
    reads the ids (CLIP pools at the largest id) then reads them where the examples have them.
    """
    generator = torch.Generator().manual_seed(seed)
    masks = [
        t != 0
        for n, t in zip(signature.names, signature.inputs, strict=True)
        if is_mask_name(n) and not t.is_floating_point()
    ]
    batches = []
    for _ in range(count):
        batch = []
        for name, t in zip(signature.names, signature.inputs, strict=True):
            if _copied(name, t):
                batch.append(t.clone())
            elif t.is_floating_point():
                std = float(t.float().std()) if t.numel() > 1 else 1.0
                noise = torch.randn(t.shape, generator=generator)
                batch.append((noise * std + float(t.float().mean())).to(t.dtype))
            else:
                low, high = int(t.min()), int(t.max())
                drawn = torch.randint(low, high + 1, t.shape, generator=generator).to(t.dtype)
                for mask in masks:
                    if mask.shape == t.shape:
                        drawn = torch.where(mask, drawn, t)
                batch.append(drawn)
        batches.append(tuple(batch))
    return batches


def padding_positions(
    input_names: Sequence[str],
    batch: Sequence[torch.Tensor],
    output_names: Sequence[str],
    outputs: Sequence[Any],
) -> list[Any]:
    """Per output, a boolean array over its leading dimensions that is False at padding, or
    None (every position compared), for the parity check.

    A padding mask (``*attention_mask``, integer or boolean, 2-D) applies to the outputs whose
    first two dimensions are its shape. With a decoder (an input ``decoder_input_ids`` or
    ``decoder_attention_mask``) ``attention_mask`` is the encoder's: it applies to outputs named
    ``encoder*`` only, and ``decoder_attention_mask`` to the others.
    """
    masks = {
        name: t.numpy() != 0
        for name, t in zip(input_names, batch, strict=True)
        if is_mask_name(name) and not t.is_floating_point() and t.dim() == 2
    }
    decoder = any(n.startswith("decoder_") for n in input_names)
    found: list[Any] = []
    for name, output in zip(output_names, outputs, strict=True):
        shape = tuple(getattr(output, "shape", ()))
        chosen = None
        for mask_name, mask in masks.items():
            if decoder:
                encoder_side = name.split(".")[-1].startswith("encoder")
                if (mask_name == "attention_mask") != encoder_side:
                    continue
            if len(shape) >= 3 and shape[:2] == mask.shape:
                chosen = mask
                break
        found.append(chosen)
    return found

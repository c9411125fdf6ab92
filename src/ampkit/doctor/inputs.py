"""What ``ampkit doctor`` diagnoses: a ``--model`` string (the built-in GPT by default, a
library model, a user's ``module:factory``), and the loss-scale history of an
``ampkit train --out`` run."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError, DataError
from ampkit.models.built import BuiltModel, model_error, refuse_meta
from ampkit.models.resolve import (
    build_model,
    call_factory,
    from_factory_result,
    is_closure_form,
    is_factory_spec,
)

__all__ = ["Case", "builtin_case", "load_case", "load_factory", "load_scale_history"]


@dataclass(frozen=True)
class Case:
    """What the doctor runs: a model and a closure (each call: the forward pass on the next
    batch, returning the loss). Unpacks as ``model, closure = case``.

    Attributes:
        model: the fp32 model.
        closure: runs the forward pass on the next batch and returns the loss.
        built: the :class:`~ampkit.models.built.BuiltModel` it came from; None for a factory
            that returned ``(model, closure)``.
    """

    model: nn.Module
    closure: Callable[[], torch.Tensor]
    built: BuiltModel | None = None

    @classmethod
    def of(cls, built: BuiltModel, device: torch.device | None = None) -> Case:
        """The case of a built model (moved to ``device`` when given)."""
        if device is not None:
            built.model.to(device)
        return cls(built.model, built.closure(device=device), built)

    def __iter__(self) -> Iterator[Any]:
        yield self.model
        yield self.closure


def builtin_case(
    *, seed: int = 0, batch_size: int | None = None, device: torch.device | None = None
) -> Case:
    """The built-in GPT (the same model as every command's ``gpt``) on the standard-library
    corpus; each closure call is a new batch."""
    return Case.of(build_model("gpt", batch_size=batch_size, seed=seed), device)


def load_factory(spec: str) -> Case:
    """Import ``package.module:factory`` (current folder first), call it, and make a case.

    The factory returns ``(model, closure)`` (``closure()`` runs the forward pass and returns
    the loss), or anything :func:`ampkit.models.resolve.from_factory_result` accepts:
    ``(model, batch)``, ``(model, inputs, targets)`` or a ``BuiltModel``.

    Raises:
        ConfigurationError: the spec is malformed, the module or the function does not exist,
            the factory raised or returned none of the forms above, or its model or inputs
            are on the ``meta`` device (no data; for a closure: the loss it returns).
    """
    made = call_factory(spec)
    if is_closure_form(made):
        refuse_meta(spec, made[0])
        return Case(made[0], _refusing_meta_loss(spec, made[1]))
    if isinstance(made, BuiltModel):
        refuse_meta(spec, made.model, made.example_batch)
    elif isinstance(made, tuple) and made and isinstance(made[0], nn.Module):
        refuse_meta(spec, made[0], made[1:])
    try:
        built = from_factory_result(spec, made)
    except ConfigurationError:
        seen = (
            f"a tuple of ({', '.join(type(r).__name__ for r in made)})"
            if isinstance(made, tuple)
            else f"a {type(made).__name__}"
        )
        raise model_error(
            f"{spec}() returned {seen}. It must return (model, closure): an "
            "nn.Module and a function that runs the forward pass and returns the loss; or "
            "(model, batch), (model, inputs, targets), or an ampkit.models.resolve.BuiltModel."
        ) from None
    return Case.of(built)


def _refusing_meta_loss(spec: str, closure: Callable[[], Any]) -> Callable[[], Any]:
    """``closure``, refusing a loss on the ``meta`` device (its inputs held no data)."""

    def checked() -> Any:
        loss = closure()
        if isinstance(loss, torch.Tensor) and loss.is_meta:
            raise model_error(
                f"{spec}'s closure returned a loss on the meta device (no data): its inputs "
                "hold no values. Create the batch on a real device (cpu, cuda) in the factory."
            )
        return loss

    return checked


def load_case(
    spec: str | None,
    *,
    seed: int = 0,
    device: torch.device | None = None,
    allow_large: bool = False,
) -> Case:
    """The model and closure for ``--model``: None is ``gpt``; built-in and library models are
    built by :func:`ampkit.models.resolve.build_model` (seeded) and moved to ``device`` (None:
    the CPU); a ``package.module:factory`` may also return ``(model, closure)`` here
    (:func:`load_factory`). ``allow_large`` lets an ``hf:`` model past the size limit of
    :mod:`ampkit.models.size`.

    Raises:
        ConfigurationError: as :func:`ampkit.models.resolve.build_model` and :func:`load_factory`;
            a ``device`` other than the CPU with a factory (it places its own model).
        MissingDependencyError: ``hf:``/``timm:`` without the library installed.
    """
    spec = "gpt" if spec is None else spec
    if not is_factory_spec(spec):
        return Case.of(build_model(spec, seed=seed, allow_large=allow_large), device)
    if device is not None and device.type != "cpu":
        raise ConfigurationError(
            f"device: {str(device)!r} with the factory {spec}: a factory's model and closure "
            "stay where the factory put them. Create them on that device in the factory and "
            "leave device unset.",
            argument="device",
        )
    return load_factory(spec)


def load_scale_history(path: str | Path) -> tuple[dict[str, Any], ...]:
    """Rows of a ``metrics.jsonl`` (``ampkit train --out``) with step, scale, skipped and loss.

    Raises:
        DataError: the file is missing, unreadable, not UTF-8, empty, not JSON lines, or lacks
            ``step``/``scale``.
    """
    file = Path(path)
    if not file.is_file():
        raise DataError(f"--metrics: {file} does not exist. Pass the metrics.jsonl of a run.")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"--metrics: {file} is not UTF-8 text (undecodable byte at offset {exc.start}), so "
            "it is not a metrics.jsonl. Pass the metrics.jsonl written by `ampkit train --out DIR`."
        ) from None
    except OSError as exc:
        raise DataError(
            f"--metrics: cannot read {file} ({exc.strerror or exc}). Make it readable or pass "
            "another metrics.jsonl."
        ) from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"--metrics: {file} line {number} is not JSON ({exc.msg}). Pass the "
                "metrics.jsonl written by `ampkit train --out DIR`."
            ) from None
        if not isinstance(row, dict) or "step" not in row or "scale" not in row:
            raise DataError(
                f"--metrics: {file} line {number} has no 'step' and 'scale'. Pass the "
                "metrics.jsonl written by `ampkit train --out DIR`."
            )
        rows.append({k: row.get(k) for k in ("step", "scale", "skipped", "loss")})
    if not rows:
        raise DataError(f"--metrics: {file} is empty. Pass the metrics.jsonl of a run.")
    return tuple(rows)

"""What ``ampkit doctor`` diagnoses: a ``--model`` string (the built-in GPT by default, a
library model, a user's ``module:factory``), and the loss-scale history of an
``ampkit train --out`` run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError, DataError
from ampkit.models.resolve import build_model, call_factory, from_factory_result, gpt_model

__all__ = ["builtin_case", "load_case", "load_factory", "load_scale_history"]

Case = tuple[nn.Module, Callable[[], torch.Tensor]]


def builtin_case(
    *, seed: int = 0, batch_size: int = 8, seq_len: int = 64, device: torch.device | None = None
) -> Case:
    """A small built-in GPT on the standard-library corpus; each closure call is a new batch."""
    built = gpt_model(batch_size, seq_len, n_embd=64, seed=seed, corpus_bytes=200_000)
    dev = device or torch.device("cpu")
    built.model.to(dev)
    return built.model, built.closure(device=dev)


def load_factory(spec: str) -> Case:
    """Import ``package.module:factory`` (current folder first), call it, and make a case.

    The factory returns ``(model, closure)`` (``closure()`` runs the forward pass and returns
    the loss), or anything :func:`ampkit.models.resolve.from_factory_result` accepts:
    ``(model, batch)``, ``(model, inputs, targets)`` or a ``BuiltModel``.

    Raises:
        ConfigurationError: the spec is malformed, the module or the function does not exist,
            or the factory returned none of the forms above.
    """
    made = call_factory(spec)
    if (
        isinstance(made, tuple)
        and len(made) == 2
        and isinstance(made[0], nn.Module)
        and callable(made[1])
        and not isinstance(made[1], nn.Module)
    ):
        return made
    try:
        built = from_factory_result(spec, made)
    except ConfigurationError:
        seen = (
            f"a tuple of ({', '.join(type(r).__name__ for r in made)})"
            if isinstance(made, tuple)
            else f"a {type(made).__name__}"
        )
        raise ConfigurationError(
            f"--model: {spec}() returned {seen}. It must return (model, closure): an "
            "nn.Module and a function that runs the forward pass and returns the loss; or "
            "(model, batch), (model, inputs, targets), or an ampkit.models.resolve.BuiltModel."
        ) from None
    return built.model, built.closure()


def load_case(spec: str | None, *, seed: int = 0, device: torch.device | None = None) -> Case:
    """The model and closure for ``--model``: None or ``gpt`` is the built-in GPT; ``hf:``,
    ``timm:``, ``convnet`` are built by :func:`ampkit.models.resolve.build_model` (seeded);
    anything else is a factory (:func:`load_factory`). ``device`` (built models only): where
    the model and its batches go; None keeps them on the CPU.

    Raises:
        ConfigurationError: as :func:`ampkit.models.resolve.build_model` and :func:`load_factory`;
            a ``device`` other than the CPU with a factory (it places its own model).
        MissingDependencyError: ``hf:``/``timm:`` without the library installed.
    """
    if spec is None or spec == "gpt":
        return builtin_case(seed=seed, device=device)
    if spec == "convnet" or spec.partition(":")[0] in ("hf", "timm") or ":" not in spec:
        built = build_model(spec, seed=seed)
        if device is not None:
            built.model.to(device)
        return built.model, built.closure(device=device)
    if device is not None and device.type != "cpu":
        raise ConfigurationError(
            f"device: {str(device)!r} with the factory {spec}: a factory's model and closure "
            "stay where the factory put them. Create them on that device in the factory and "
            "leave device unset."
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

"""What ``ampkit doctor`` diagnoses: the built-in GPT, a user's ``module:factory``, and the
loss-scale history of an ``ampkit train --out`` run."""

from __future__ import annotations

import difflib
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampkit._factory import call_factory
from ampkit.errors import ConfigurationError, DataError

__all__ = ["builtin_case", "load_factory", "load_scale_history"]

Case = tuple[nn.Module, Callable[[], torch.Tensor]]


def builtin_case(
    *, seed: int = 0, batch_size: int = 8, seq_len: int = 64, device: torch.device | None = None
) -> Case:
    """A small built-in GPT on the standard-library corpus; each closure call is a new batch."""
    from ampkit.gpt.corpus import load_corpus
    from ampkit.gpt.model import GPT, GPTConfig

    corpus = load_corpus(max_bytes=200_000)
    torch.manual_seed(seed)
    model = GPT(GPTConfig(block_size=seq_len, n_layer=2, n_head=4, n_embd=64))
    dev = device or torch.device("cpu")
    model.to(dev)
    calls = [0]

    def closure() -> torch.Tensor:
        x, y = corpus.batch(calls[0], batch_size, seq_len, seed=seed, device=dev)
        calls[0] += 1
        _, loss = model(x, y)
        return loss

    return model, closure


def load_factory(spec: str) -> Case:
    """Import ``package.module:factory``, call it, and check it returned ``(model, closure)``.

    The current directory is searched first, as ``python -m`` would.

    Raises:
        ConfigurationError: the spec is malformed, the module or the function does not exist,
            or the factory returned something other than ``(nn.Module, callable)``.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr or not attr.isidentifier():
        raise ConfigurationError(
            f"--model: {spec!r} is not of the form package.module:factory. Name a module and a "
            "function in it that returns (model, closure), e.g. mymodels.vit:make."
        )
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the user's module exists but imports something missing: show it
        raise ConfigurationError(
            f"--model: cannot import {module_name!r} (no module named {exc.name!r}). Pass an "
            "importable module: run from the folder that holds it, or install its package."
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)
    factory = getattr(module, attr, None)
    if not callable(factory):
        names = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
        guess = difflib.get_close_matches(attr, names, n=1)
        hint = f" Did you mean {guess[0]!r}?" if guess else ""
        raise ConfigurationError(
            f"--model: {module_name} has no function {attr!r}.{hint} The factory must be a "
            "function returning (model, closure)."
        )
    result = call_factory(factory, spec, "(model, closure)")
    if (
        not isinstance(result, tuple)
        or len(result) != 2
        or not isinstance(result[0], nn.Module)
        or not callable(result[1])
    ):
        seen = (
            f"a tuple of ({', '.join(type(r).__name__ for r in result)})"
            if isinstance(result, tuple)
            else f"a {type(result).__name__}"
        )
        raise ConfigurationError(
            f"--model: {spec}() returned {seen}. It must return (model, closure): an "
            "nn.Module and a function that runs the forward pass and returns the loss."
        )
    return result


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

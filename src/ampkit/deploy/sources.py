"""What ``ampkit export`` exports: the built-in GPT (fresh, or trained by ``ampkit train
--out``), or any other ``--model`` (resolved by :func:`ampkit.models.resolve.build_model`; a
user's ``package.module:factory`` returns ``(model, example_inputs)``).

A fresh ``gpt`` is the ``gpt`` of every command (:data:`ampkit.models.builtin.GPT_DEFAULTS`).

A trained GPT is rebuilt from its run folder: the fp32 ``model.safetensors`` gives the weights
and every shape (vocabulary, width, depth, context), ``summary.json``'s ``config`` the number of
heads. A checkpoint folder (``runs/a/checkpoints/step-N``) is verified against its manifest
first. Weights that do not fit the model are refused with the file's name.

The parity batches of the GPT are held-out text: the standard-library sources *after* the
first 2,000,000 bytes that ``ampkit train`` trains on by default.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampkit.errors import CheckpointError, ConfigurationError, NonFiniteWeightsError

__all__ = ["GPTLogits", "held_out_batches", "load_factory", "load_gpt", "read_weights_and_config"]

_TRAIN_BYTES = 2_000_000
_BLOCK = re.compile(r"^blocks\.(\d+)\.")


class GPTLogits(nn.Module):
    """The built-in GPT for serving: ``idx -> {"logits": ...}`` (no targets, no loss)."""

    def __init__(self, gpt: nn.Module) -> None:
        super().__init__()
        self.gpt = gpt

    def forward(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.gpt(idx)[0]}


def read_weights_and_config(
    path: str | Path,
) -> tuple[dict[str, torch.Tensor], Path, dict[str, Any]]:
    """``(fp32 weights, where they came from, run config)`` from a run folder (its final
    ``model.safetensors``), a checkpoint folder of either layout (verified first; a sharded one
    is consolidated) or a safetensors file (:func:`ampkit.checkpoint.folder.read_weights`);
    the run config is ``summary.json``'s ``config`` of the run they belong to. Tied weights are
    tied again.

    Raises:
        CheckpointError: as :func:`~ampkit.checkpoint.folder.read_weights`.
    """
    from ampkit.checkpoint.folder import read_weights

    weights = read_weights(path)
    run = weights.source.parent.parent if weights.manifest is not None else weights.source.parent
    config: dict[str, Any] = {}
    summary = run / "summary.json"
    if summary.is_file():
        config = dict(json.loads(summary.read_text()).get("config") or {})
    return weights.tensors, weights.source, config


def load_gpt(checkpoint: str | Path | None, *, seed: int = 0) -> tuple[GPTLogits, int]:
    """The built-in GPT, from ``checkpoint`` (a run folder, checkpoint folder or weights file;
    its shape read off the weights) or ``--model gpt`` as every command builds it, seeded with
    ``seed``; returns ``(model, context length)``.

    Raises:
        CheckpointError: as :func:`read_weights_and_config`, weights of another model, or no head count.
    """
    from ampkit.models.gpt import GPT, GPTConfig
    from ampkit.models.resolve import build_model

    if checkpoint is None:
        built = build_model("gpt", seed=seed)
        return GPTLogits(built.model), built.config.block_size
    weights, file, config = read_weights_and_config(checkpoint)
    shapes = {k: tuple(v.shape) for k, v in weights.items()}
    if "tok_emb.weight" not in shapes or "pos_emb.weight" not in shapes:
        raise CheckpointError(
            f"--checkpoint: {file} holds no weights of the built-in GPT (no tok_emb/pos_emb; "
            f"it has {', '.join(list(shapes)[:3])}, ...). Pass --model MODULE:FACTORY for "
            "another model."
        )
    if "n_head" not in config:
        raise CheckpointError(
            f"--checkpoint: the run of {file} has no summary.json with a 'config' (n_head "
            "cannot be read off the weights). Pass the folder of a run written by "
            "`ampkit train --out DIR`."
        )
    layers = {int(m.group(1)) for k in shapes if (m := _BLOCK.match(k))}
    gpt_config = GPTConfig(
        vocab_size=shapes["tok_emb.weight"][0],
        n_embd=shapes["tok_emb.weight"][1],
        block_size=shapes["pos_emb.weight"][0],
        n_layer=len(layers),
        n_head=int(config["n_head"]),
    )
    model = GPTLogits(GPT(gpt_config))
    fit(model.gpt, weights, file)
    return model, gpt_config.block_size


def fit(model: nn.Module, weights: dict[str, torch.Tensor], file: Path) -> None:
    """Load ``weights`` into ``model`` strictly.

    Raises:
        CheckpointError: keys or shapes differ (the message names the file and the first few).
        NonFiniteWeightsError: a tensor holds inf/NaN (the message names the file, the first
            few tensors and the count): nothing exported from it could be right.
    """
    from ampkit.deploy.exporter import listed, nonfinite_tensors

    bad = nonfinite_tensors(weights.items())
    if bad:
        raise NonFiniteWeightsError(
            f"--checkpoint: {file} holds inf/NaN in {len(bad)} tensor(s): {listed(bad)}. A "
            "model exported from it would compute inf/NaN. Pass a checkpoint with finite "
            "weights (an earlier one of the run: RUN/checkpoints/step-N)."
        )
    own = model.state_dict()
    missing = [k for k in own if k not in weights]
    unexpected = [k for k in weights if k not in own]
    resized = [
        f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in weights and weights[k].shape != v.shape
    ]
    if missing or unexpected or resized:
        seen = "; ".join(
            f"{label}: {', '.join(items[:3])}{', ...' if len(items) > 3 else ''}"
            for label, items in [
                ("missing", missing),
                ("unexpected", unexpected),
                ("other shape", resized),
            ]
            if items
        )
        raise CheckpointError(
            f"--checkpoint: {file} is a checkpoint of another model ({seen}). Pass the "
            "checkpoint of this model, or the --model it was trained from."
        )
    model.load_state_dict(weights)


def held_out_batches(count: int, batch_size: int, seq_len: int) -> list[torch.Tensor]:
    """``count`` batches of ``(batch_size, seq_len)`` byte tokens of held-out text."""
    from ampkit.models.corpus import stdlib_corpus_bytes

    data = stdlib_corpus_bytes(_TRAIN_BYTES + 400_000)[_TRAIN_BYTES:]
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)
    needed = count * batch_size * seq_len
    if tokens.numel() < needed:
        raise ConfigurationError(
            f"--batches: {count} batches of {batch_size}x{seq_len} need {needed} held-out bytes; "
            f"the standard library has {tokens.numel()} beyond the training text. Use fewer."
        )
    stride = tokens.numel() // (count * batch_size)
    starts = torch.arange(count * batch_size) * stride
    windows = tokens[starts[:, None] + torch.arange(seq_len)]
    return list(windows.view(count, batch_size, seq_len))


def load_factory(spec: str, *, allow_large: bool = False) -> tuple[nn.Module, Any]:
    """The model of ``--model`` and an example input for it (``allow_large``: an ``hf:`` model
    may pass the size limit of :mod:`ampkit.models.size`).

    The spec is resolved by :func:`ampkit.models.resolve.build_model` (built-in and library
    models with 2 samples per batch); the example is the first batch's inputs
    (:attr:`~ampkit.models.built.BuiltModel.example_inputs`: without the targets or
    ``labels``). A ``package.module:factory`` (imported from the current folder) returns
    ``(model, example_inputs)`` (or ``(model, inputs, targets)``, or a ``BuiltModel``).

    Raises:
        ConfigurationError: the spec is malformed, the module or function does not exist, or
            the factory returned something else.
        MissingDependencyError: transformers/timm is needed and not installed.
    """
    from ampkit.models.resolve import build_model, is_factory_spec

    built = build_model(
        spec, batch_size=None if is_factory_spec(spec) else 2, allow_large=allow_large
    )
    return built.model, built.example_inputs

"""What ``ampkit train --model`` trains when the model is not the built-in GPT: the model the
one resolver builds (:func:`ampkit.models.resolve.build_model`) and a map-style dataset for it.

``--data`` may be:

* nothing: the model's own deterministic batches (those ``ampkit bench`` trains on), split
  into samples (:data:`SYNTHETIC_BATCHES` batches of them);
* a UTF-8 text file, or a folder of them (read in sorted path order), for a causal or masked
  LM: every ``--seq-len`` window is a sample. The text is tokenised with the model's tokenizer
  when it has one (an ``hf:<local folder>`` holding one), else the model gets the text's bytes
  modulo its vocabulary; the summary says which;
* a Hugging Face ``datasets`` folder written by ``save_to_disk`` (needs ``datasets``): its
  rows, as torch tensors, with the columns the model's ``forward`` takes;
* ``package.module:factory``: a function returning a ``torch.utils.data.Dataset`` whose items
  follow the model's batch convention (:mod:`ampkit.precision.batches`).

Every sample is a pure function of its index (a masked LM's masked positions are seeded by the
index), so the Trainer's seeded sampler makes a resumed run see the batches of an uninterrupted
one.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ampkit.errors import ConfigurationError, DataError, MissingDependencyError
from ampkit.job.config import TrainConfig
from ampkit.models.built import BuiltModel
from ampkit.models.corpus import load_corpus
from ampkit.models.resolve import build_model, call_factory, is_factory_spec

__all__ = ["SYNTHETIC_BATCHES", "ModelData", "eval_batches", "resolve_model_data"]

#: Batches of a model's own synthetic data a run without ``--data`` cycles through.
SYNTHETIC_BATCHES = 16

#: The ``hf:`` tasks that train on text windows.
_TEXT_TASKS = ("causal LM", "masked LM")


@dataclass(frozen=True)
class ModelData:
    """A resolved ``--model`` and its ``--data``.

    Attributes:
        built: the model, its loss function and its batch convention.
        dataset: map-style dataset of samples (the Trainer batches and shuffles it).
        source: where the samples come from and how text became tokens, for the summary.
        sha256: digest of the data, which a resume compares.
        tokens_per_sample: tokens in one sample (for tokens/s), None when it counts samples.
    """

    built: BuiltModel
    dataset: torch.utils.data.Dataset[Any]
    source: str
    sha256: Callable[[], str]
    tokens_per_sample: int | None

    def validate(self, batch_size: int, world_size: int = 1) -> None:
        """Refuse data with fewer samples than one global batch.

        Raises:
            DataError: the dataset holds fewer than ``batch_size * world_size`` samples.
        """
        wanted = batch_size * world_size
        have = len(self.dataset)  # type: ignore[arg-type]
        if have < wanted:
            raise DataError(
                f"--batch-size: a batch of {wanted} samples needs at least {wanted}, but "
                f"{self.source} has {have}. Use a smaller --batch-size or --seq-len, or more data."
            )


def _task(built: BuiltModel) -> str | None:
    """The ``hf:`` task name of a built model (None for other models)."""
    if not built.name.startswith("hf:") or built.config is None:
        return None
    from ampkit.models.hf_tasks import hf_task

    return hf_task(built.config, built.name).name


def _row(value: Any, index: int, rows: int) -> Any:
    """Row ``index`` of a batch (tensors with a batch dimension; other values are dropped)."""
    if isinstance(value, torch.Tensor):
        return value[index] if value.dim() > 0 and value.shape[0] == rows else None
    if isinstance(value, dict):
        picked = {k: _row(v, index, rows) for k, v in value.items()}
        return {k: v for k, v in picked.items() if v is not None}
    if isinstance(value, (tuple, list)):
        return tuple(_row(v, index, rows) for v in value)
    return None


class _SyntheticSamples(torch.utils.data.Dataset[Any]):
    """The samples of a model's first :data:`SYNTHETIC_BATCHES` batches."""

    def __init__(self, built: BuiltModel) -> None:
        self.built = built
        self.rows = built.batch_size

    def __len__(self) -> int:
        return SYNTHETIC_BATCHES * self.rows

    def __getitem__(self, index: int) -> Any:
        return _row(self.built.batch(index // self.rows), index % self.rows, self.rows)


class _TextWindows(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Every ``seq_len`` window of a token stream, as a causal or masked LM's batch row."""

    def __init__(self, tokens: torch.Tensor, seq_len: int, masked: bool, mask_id: int, seed: int):
        self.tokens, self.seq_len = tokens, seq_len
        self.masked, self.mask_id, self.seed = masked, mask_id, seed

    def __len__(self) -> int:
        return max(0, int(self.tokens.numel()) - self.seq_len + 1)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.tokens[index : index + self.seq_len].long()
        row = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if not self.masked:  # the model shifts the labels itself
            return {**row, "labels": ids.clone()}
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        chosen = torch.rand(ids.shape, generator=generator) < 0.15
        chosen[0] = True  # at least one target per row
        return {
            **row,
            "input_ids": ids.masked_fill(chosen, self.mask_id),
            "labels": ids.masked_fill(~chosen, -100),
        }


def _text_bytes(path: Path) -> tuple[torch.Tensor, str]:
    """The bytes of a text file, or of a folder's files in sorted path order."""
    if not path.is_dir():
        corpus = load_corpus(path)
        return corpus.tokens, str(path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise DataError(f"--data: the folder {path} holds no files. Put UTF-8 text files in it.")
    tokens = torch.cat([load_corpus(p).tokens for p in files])
    return tokens, f"{path} ({len(files)} files)"


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and (
        (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file()
    )


def _digest(*parts: bytes) -> Callable[[], str]:
    def digest() -> str:
        h = hashlib.sha256()
        for part in parts:
            h.update(part)
        return h.hexdigest()

    return digest


def _saved_dataset(path: Path, built: BuiltModel) -> tuple[Any, Callable[[], str]]:
    if importlib.util.find_spec("datasets") is None:
        raise MissingDependencyError(
            f"--data: {path} is a Hugging Face datasets folder, and the datasets package is not "
            "installed. Install it (pip install datasets), or pass a text file.",
            argument="data",
        )
    import datasets

    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise DataError(
                f"--data: {path} holds the splits {', '.join(loaded)} and no 'train'. Save the "
                "training split alone (dataset['name'].save_to_disk(...))."
            )
        loaded = loaded["train"]
    from ampkit.models.hf_tasks import forward_arguments

    takes = forward_arguments(built.model)
    columns = [c for c in loaded.column_names if c in takes]
    if not columns:
        raise DataError(
            f"--data: {path} has the columns {', '.join(loaded.column_names)}, none of which "
            f"{built.name} takes. Name the columns as the model's forward arguments "
            "(input_ids, attention_mask, labels, pixel_values, ...)."
        )
    loaded = loaded.with_format("torch", columns=columns)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return loaded, _digest(*(p.read_bytes() for p in files))


def eval_batches(dataset: torch.utils.data.Dataset[Any], batch_size: int, stride: int) -> Any:
    """The batches of ``--eval-data``: every ``stride``-th sample (``--seq-len`` for text
    windows: the non-overlapping ones), in order, ``batch_size`` at a time.

    Raises:
        DataError: the data holds no sample.
    """
    count = len(dataset)  # type: ignore[arg-type]
    if count == 0:
        raise DataError("--eval-data: it holds no sample. Pass more data, or a shorter --seq-len.")
    picked = torch.utils.data.Subset(dataset, range(0, count, stride))
    return torch.utils.data.DataLoader(picked, batch_size=batch_size, shuffle=False)


def resolve_model_data(config: TrainConfig, built: BuiltModel | None = None) -> ModelData:
    """Build ``config.model`` (seeded by ``config.seed``) and its dataset from ``config.data``
    (see the module docstring); ``built``: the model already built for it (the eval data's).

    Raises:
        ConfigurationError: the model cannot be built, or its kind cannot train on the data
            given (text for a model that is not a causal or masked LM).
        DataError: the data is missing, unreadable, not text, or without usable columns.
        MissingDependencyError: ``hf:`` without transformers, a ``datasets`` folder without
            ``datasets``.
    """
    if built is None:
        built = build_model(config.model, batch_size=config.batch_size, seed=config.seed)
    task = _task(built)
    if config.data is None:
        return ModelData(
            built=built,
            dataset=_SyntheticSamples(built),
            source=f"{config.model}'s own synthetic batches ({SYNTHETIC_BATCHES} of them)",
            sha256=_digest(f"synthetic {config.model} {config.seed}".encode()),
            tokens_per_sample=built.tokens_per_sample,
        )
    path = Path(config.data)
    if is_factory_spec(config.data) and not path.exists():
        made = call_factory(config.data)
        if not isinstance(made, torch.utils.data.Dataset) or not hasattr(made, "__len__"):
            raise ConfigurationError(
                f"--data: {config.data} returned {type(made).__name__}. Return a map-style "
                "torch.utils.data.Dataset (with __len__ and __getitem__) whose items the model "
                "takes.",
                argument="data",
            )
        return ModelData(built, made, f"{config.data}", _digest(config.data.encode()), None)
    if _is_saved_dataset(path):
        loaded, digest = _saved_dataset(path, built)
        return ModelData(built, loaded, f"{path} (Hugging Face datasets)", digest, None)
    if task not in _TEXT_TASKS:
        kind = task or "a factory model"
        raise ConfigurationError(
            f"--data: {config.data} is text, and {config.model} is {kind}, which does not train "
            "on text windows. Pass a datasets folder or a package.module:factory returning a "
            "Dataset, or leave out --data to train on the model's own synthetic batches.",
            argument="data",
        )
    raw, where = _text_bytes(path)
    from ampkit.models.hf_tasks import text_config

    text = text_config(built.config)
    vocab = int(text.vocab_size)
    limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
    if isinstance(limit, int) and config.seq_len > limit:
        raise ConfigurationError(
            f"--seq-len: {config.seq_len} is longer than {config.model} takes ({limit} "
            f"positions). Use --seq-len {limit} or less.",
            argument="seq_len",
        )
    masked = task == "masked LM"
    mask_id = getattr(built.config, "mask_token_id", None)
    tokenizer = built.tokenizer
    if tokenizer is not None:
        ids = tokenizer(bytes(raw.numpy()).decode("utf-8"))["input_ids"]
        tokens = torch.tensor(ids, dtype=torch.int32)
        how = f"tokenised with the model's {type(tokenizer).__name__}, {len(ids):,} tokens"
        mask_id = getattr(tokenizer, "mask_token_id", None) if mask_id is None else mask_id
    else:
        tokens = (raw.long() % vocab).to(torch.int32)
        how = f"no tokenizer: bytes modulo the {vocab}-token vocabulary"
    mask_id = mask_id if isinstance(mask_id, int) else vocab - 1
    return ModelData(
        built=built,
        dataset=_TextWindows(tokens, config.seq_len, masked, mask_id, config.seed),
        source=f"{where} ({how})",
        sha256=_digest(raw.numpy().tobytes()),
        tokens_per_sample=config.seq_len,
    )

"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP): writer, reader, export.

Every rank writes its own shards of the model and optimizer state into one folder (no rank-0
gather), synchronously (:func:`save`) or in a background thread while training goes on
(:func:`async_save`). Loading (:func:`load_into`) reads each rank's part for the *current*
sharding, so a checkpoint written by 2 processes loads into 1 or 4 (DCP resharding), and a
checkpoint of a plain model loads into an FSDP2-sharded one and back. :func:`read_model_weights`
consolidates the model's weights offline, without a process group.

This module knows DCP only; the folder it writes into, the manifest over DCP's files and the
atomic rename are :mod:`ampkit.checkpoint.folder`'s.

Safety: DCP stores its index (``.metadata``) with ``pickle`` and small non-tensor values with
``torch.save``, and loads both with code execution allowed. The reader here unpickles the index
with an allow-list of DCP's own metadata classes and loads the values with
``torch.load(weights_only=True)``, so a sharded checkpoint, like a full one, runs no stored code.

Versions: the public ``torch.distributed.checkpoint`` API of torch >= 2.5 (``save``, ``load``,
``async_save``, ``FileSystemReader``/``FileSystemWriter``, ``DefaultLoadPlanner``,
``state_dict.get_state_dict``/``set_state_dict``); ``no_dist`` is passed only where the
installed torch has it (older versions infer it from a missing process group).
"""

from __future__ import annotations

import inspect
import io
import pickle
import re
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ampkit.checkpoint._digest import FileDigest, file_digest
from ampkit.errors import CheckpointError
from ampkit.precision.optimizer_state import load_optimizer_state

__all__ = [
    "MODEL",
    "OPTIMIZER",
    "PLAIN_OPTIMIZER_KEYS",
    "PlainLayout",
    "async_save",
    "check_index",
    "check_plain_files",
    "checkpoint_shapes",
    "dcp_failure",
    "index_extents",
    "load_into",
    "load_plain_into",
    "plain_layout",
    "plain_shapes",
    "read_plain_model_weights",
    "read_model_weights",
    "save",
    "shard_digests",
    "state_dicts",
]

#: The top-level keys of the state DCP writes (the flattened keys start with these).
MODEL, OPTIMIZER = "model", "optimizer"

# The single-process note DCP warns with when no process group exists; that case is intended.
_NO_GROUP = r"torch\.distributed is disabled, unavailable or uninitialized"


def state_dicts(
    model: nn.Module, optimizer: torch.optim.Optimizer, *, flatten_optimizer: bool = False
) -> dict[str, Any]:
    """``{"model": ..., "optimizer": ...}`` as this rank holds them: DTensor shards under FSDP2,
    plain tensors otherwise; optimizer state keyed by parameter names, so it reshards
    (``flatten_optimizer``: the param groups per parameter too, as torchtitan writes them).
    Initialises an optimizer that has not stepped yet (a zero-learning-rate step)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(flatten_optimizer_state_dict=flatten_optimizer)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    return {MODEL: model_state, OPTIMIZER: optim_state}


def _group_kwargs(function: Callable[..., Any], process_group: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if process_group is not None:
        kwargs["process_group"] = process_group
    elif not (dist.is_available() and dist.is_initialized()):
        if "no_dist" in inspect.signature(function).parameters:
            kwargs["no_dist"] = True
    return kwargs


def save(state: dict[str, Any], folder: str | Path, *, process_group: Any = None) -> None:
    """Write ``state`` into ``folder``: each rank its shards, rank 0 the index last; every file
    is fsynced. Collective over ``process_group`` (the default group when initialised)."""
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(str(folder), sync_files=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_GROUP)
        dcp.save(state, storage_writer=writer, **_group_kwargs(dcp.save, process_group))


def async_save(state: dict[str, Any], folder: str | Path, *, process_group: Any = None) -> Future:
    """Copy ``state`` to host memory now and write it into ``folder`` in a background thread;
    the returned future completes when every rank's files and the index are written.

    Pass a process group of its own (gloo) when training runs collectives meanwhile: the
    background thread's collectives must not interleave with the training step's.
    """
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(str(folder), sync_files=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_GROUP)
        response = dcp.async_save(
            state, storage_writer=writer, **_group_kwargs(dcp.async_save, process_group)
        )
    # torch >= 2.8 may wrap the future in an AsyncSaveResponse
    return cast(Future, getattr(response, "upload_completion", response))


def shard_digests(folder: str | Path, rank: int) -> dict[str, FileDigest]:
    """Digest and size of the shard files rank ``rank`` wrote into ``folder``
    (``__<rank>_<n>.distcp``), by file name.

    Each rank hashes its own files right after writing them (from its own page cache, all
    ranks at once), so rank 0 does not read every rank's shards when it commits the checkpoint.
    """
    found = {}
    for file in sorted(Path(folder).glob(f"__{rank}_*.distcp")):
        found[file.name] = FileDigest(file_digest(file), file.stat().st_size)
    return found


# -- reading without running stored code ---------------------------------------------------------

_DCP = "torch.distributed.checkpoint."
_PATHS = {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"}


class _IndexUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``.metadata``: its own metadata classes, sizes, dtypes and paths only."""

    def find_class(self, module: str, name: str) -> Any:
        if module == f"{_DCP}metadata" or (module.startswith(_DCP) and name == "_StorageInfo"):
            value = super().find_class(module, name)
            if isinstance(value, type) and value.__module__ == module:
                return value
        elif module == "torch" and name == "Size":
            return torch.Size
        elif module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        elif module == "torch.serialization" and name == "_get_layout":
            return super().find_class(module, name)  # maps a layout's name to torch.layout
        elif module == "pathlib" and name in _PATHS:
            return super().find_class(module, name)
        elif module == "collections" and name == "OrderedDict":
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a DCP index")


def _reader(folder: str | Path) -> Any:
    """A ``FileSystemReader`` whose index is unpickled with the allow-list above."""
    import torch.distributed.checkpoint as dcp

    class SafeReader(dcp.FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            path = Path(str(self.path)) / ".metadata"
            with open(path, "rb") as f:
                metadata = _IndexUnpickler(f).load()
            if hasattr(metadata, "storage_meta"):
                from torch.distributed.checkpoint.metadata import StorageMeta

                if metadata.storage_meta is None:
                    metadata.storage_meta = StorageMeta()
                metadata.storage_meta.load_id = getattr(self, "load_id", None)
            return metadata

    return SafeReader(str(folder))


def _planner() -> Any:
    """DCP's default load planner, refusing non-tensor values that need code to load."""
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class SafePlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            # DCP unpickles these without restriction; load them as plain data first (raises
            # on anything else), then hand over bytes now known to hold plain data only.
            torch.load(value, weights_only=True)
            value.seek(0)
            super().load_bytes(read_item, value)

    return SafePlanner()


def _index(folder: str | Path) -> Any:
    try:
        return _reader(folder).read_metadata()
    except Exception as exc:  # unpickling damaged bytes raises many kinds of error
        raise CheckpointError(
            f"checkpoint: {Path(folder) / '.metadata'} is not a readable DCP index ({exc}). "
            "Resume from another checkpoint."
        ) from None


def check_index(folder: str | Path) -> set[str]:
    """Read the DCP index of ``folder`` with the allow-list; raise if it is not plain DCP
    metadata (a pickle that would run code, another object, damaged bytes). Return the names
    of the shard files it refers to (relative to ``folder``).

    Raises:
        CheckpointError: the index cannot be read safely; the message names the file.
    """
    return set(index_extents(folder))


def index_extents(folder: str | Path) -> dict[str, int]:
    """For each shard file the DCP index of ``folder`` refers to, the bytes it must hold at
    least (the end of the last record the index places in it). The index is read with the
    allow-list.

    Raises:
        CheckpointError: the index cannot be read safely.
    """
    extents: dict[str, int] = {}
    for info in (getattr(_index(folder), "storage_data", None) or {}).values():
        name = getattr(info, "relative_path", None)
        if isinstance(name, str):
            end = int(getattr(info, "offset", 0) or 0) + int(getattr(info, "length", 0) or 0)
            extents[name] = max(extents.get(name, 0), end)
    return extents


def check_plain_files(folder: str | Path) -> int:
    """Check a ``torch.distributed.checkpoint`` folder that has no manifest as far as its index
    allows: the index reads safely, and every shard file it names is there and holds at least
    the bytes the index places in it. There are no hashes to check. Returns the number of shard
    files.

    Raises:
        CheckpointError: the index cannot be read safely, or a shard file is missing or shorter
            than the index says (the message names it).
    """
    root = Path(folder)
    extents = index_extents(root)
    for name, needed in sorted(extents.items()):
        file = root / name
        if not file.is_file():
            raise CheckpointError(
                f"checkpoint: {file} is missing; the index {root / '.metadata'} refers to it."
            )
        size = file.stat().st_size
        if size < needed:
            raise CheckpointError(
                f"checkpoint: {file} holds {size} bytes, but the index places {needed} in it: "
                "it is truncated."
            )
    return len(extents)


def _model_entries(index: Any, prefix: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``name -> TensorStorageMetadata`` of the model tensors in a DCP index: the keys under
    ``prefix`` (``"model."``), or with ``prefix=""`` every tensor key whose top-level group
    is not in ``skip``."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    return {
        key[len(prefix) :]: meta
        for key, meta in index.state_dict_metadata.items()
        if key.startswith(prefix)
        and isinstance(meta, TensorStorageMetadata)
        and key.split(".", 1)[0] not in skip
    }


def checkpoint_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """The global shape of every model tensor in a sharded checkpoint (from its index)."""
    return {
        name: tuple(meta.size) for name, meta in _model_entries(_index(folder), f"{MODEL}.").items()
    }


def dcp_failure(exc: BaseException) -> BaseException | None:
    """The first rank's error when ``exc`` is DCP's ``CheckpointException`` (which derives
    from ``BaseException`` and is raised on every rank); None for any other error."""
    from torch.distributed.checkpoint import CheckpointException

    if not isinstance(exc, CheckpointException):
        return None
    for failure in exc.failures.values():
        error = failure[0] if isinstance(failure, tuple) and failure else failure
        if isinstance(error, BaseException):
            return error
    return exc


def _load(state: dict[str, Any], folder: str | Path) -> None:
    import torch.distributed.checkpoint as dcp

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NO_GROUP)
            dcp.load(
                state,
                storage_reader=_reader(folder),
                planner=_planner(),
                **_group_kwargs(dcp.load, None),
            )
    except dcp.CheckpointException as exc:  # a BaseException: every rank gets it
        error = dcp_failure(exc) or exc
        raise CheckpointError(
            f"checkpoint: {folder} could not be read safely ({_describe(error)}); "
            "ampkit never runs code stored in a checkpoint. It was not written by ampkit or "
            "was altered; resume from another checkpoint."
        ) from None


def _describe(error: BaseException) -> str:
    # never pass on torch's advice to load with weights_only=False
    text = str(error)
    unsafe = re.search(r"GLOBAL (\S+) was not an allowed global", text)
    if unsafe:
        return f"it refers to {unsafe.group(1)}"
    if "Weights only load failed" in text:
        return "it holds more than plain tensors and containers"
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def load_into(model: nn.Module, optimizer: torch.optim.Optimizer, folder: str | Path) -> None:
    """Load a sharded checkpoint into the model and optimizer as they are sharded now
    (resharding when the checkpoint was written by another number of processes). Collective
    when a process group is initialised."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = state_dicts(model, optimizer)
    _as_saved(state[OPTIMIZER], folder)
    _load(state, folder)
    load_optimizer_state(  # the optimizer state in its saved dtypes, as DCP read it
        optimizer,
        state[OPTIMIZER],
        load=lambda saved: set_state_dict(
            model, optimizer, model_state_dict=state[MODEL], optim_state_dict=saved
        ),
    )


def _as_saved(optim_state: dict[str, Any], folder: str | Path) -> None:
    """Give each optimizer-state tensor DCP will load into the dtype it was saved in (DCP
    copies into the tensors it is given, casting to theirs)."""
    entries = _index(folder).state_dict_metadata
    for name, values in optim_state.get("state", {}).items():
        for key, tensor in values.items():
            saved = getattr(entries.get(f"{OPTIMIZER}.state.{name}.{key}"), "properties", None)
            dtype = getattr(saved, "dtype", None)
            if torch.is_tensor(tensor) and dtype is not None and dtype != tensor.dtype:
                values[key] = torch.empty_like(tensor, dtype=dtype)


def read_model_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """Consolidate the model's full weights from a sharded checkpoint, in one process and
    without a process group (the optimizer state is not read)."""
    entries = _model_entries(_index(folder), f"{MODEL}.")
    model = {
        name: torch.empty(tuple(m.size), dtype=m.properties.dtype) for name, m in entries.items()
    }
    _load({MODEL: model}, folder)
    return model


# -- DCP checkpoints ampkit did not write ----------------------------------------------------------

#: Where other writers keep the optimizer state: torchtitan (and ampkit) under "optimizer",
#: others, as torch's DCP tutorials, under "optim".
PLAIN_OPTIMIZER_KEYS = ("optimizer", "optim")
#: Top-level groups of other writers that are not model weights (torchtitan's among them).
_NOT_MODEL = (*PLAIN_OPTIMIZER_KEYS, "lr_scheduler", "scheduler", "dataloader", "train_state")


@dataclass(frozen=True)
class PlainLayout:
    """Where a DCP checkpoint that ampkit did not write keeps what ampkit can load.

    Attributes:
        model_prefix: ``"model."`` (``{"model": sd, ...}`` was saved) or ``""`` (the model's
            state flattened at the top level, as torchtitan writes its last, model-only step).
        optimizer_key: the top-level key of an optimizer state (``"optimizer"`` or
            ``"optim"``), or None when it holds none.
        groups: every top-level key of the checkpoint, sorted.
        tensors: how many model tensors it holds.
    """

    model_prefix: str
    optimizer_key: str | None
    groups: tuple[str, ...]
    tensors: int


def plain_layout(folder: str | Path) -> PlainLayout:
    """What a DCP checkpoint that ampkit did not write holds (read from its index safely).

    Raises:
        CheckpointError: the index cannot be read safely, or it holds no model tensor.
    """
    index = _index(folder)
    keys = list(index.state_dict_metadata)
    groups = tuple(sorted({key.split(".", 1)[0] for key in keys}))
    prefix = f"{MODEL}." if _model_entries(index, f"{MODEL}.") else ""
    entries = _model_entries(index, prefix, () if prefix else _NOT_MODEL)
    if not entries:
        raise CheckpointError(
            f"checkpoint: {folder} is a torch.distributed.checkpoint folder without model "
            f"tensors (its top-level keys: {', '.join(groups) or 'none'}). Pass a checkpoint "
            "saved as {'model': model_state_dict, ...} or with the model's state at the top."
        )
    optimizer = next(
        (k for k in PLAIN_OPTIMIZER_KEYS if any(key.startswith(f"{k}.") for key in keys)), None
    )
    return PlainLayout(prefix, optimizer, groups, len(entries))


def plain_shapes(folder: str | Path, layout: PlainLayout) -> dict[str, tuple[int, ...]]:
    """The global shape of every model tensor of a DCP checkpoint ampkit did not write."""
    return {name: tuple(meta.size) for name, meta in _plain_entries(folder, layout).items()}


def _plain_entries(folder: str | Path, layout: PlainLayout) -> dict[str, Any]:
    """The model tensors' index entries of a DCP checkpoint ampkit did not write."""
    skip = () if layout.model_prefix else _NOT_MODEL
    return _model_entries(_index(folder), layout.model_prefix, skip)


def read_plain_model_weights(folder: str | Path, layout: PlainLayout) -> dict[str, torch.Tensor]:
    """Consolidate the model weights of a DCP checkpoint ampkit did not write, in one process
    and without a process group (nothing else is read)."""
    entries = _plain_entries(folder, layout)
    model = {
        name: torch.empty(tuple(m.size), dtype=m.properties.dtype) for name, m in entries.items()
    }
    _load({MODEL: model} if layout.model_prefix else dict(model), folder)
    return model


def _missing_optimizer_params(folder: str | Path, key: str, model: nn.Module) -> list[str]:
    """The parameters of ``model`` with no optimizer state under ``key`` in the checkpoint."""
    present = {k for k in _index(folder).state_dict_metadata if k.startswith(f"{key}.state.")}
    return [
        name
        for name, _ in model.named_parameters()
        if not any(k.startswith(f"{key}.state.{name}.") for k in present)
    ]


def load_plain_into(
    model: nn.Module, optimizer: torch.optim.Optimizer, folder: str | Path, layout: PlainLayout
) -> str | None:
    """Load a DCP checkpoint ampkit did not write into the model (and the optimizer, when it
    holds a state keyed by parameter names, as ``get_optimizer_state_dict`` writes it, nested
    or flattened as torchtitan saves it), as
    they are sharded now. Collective when a process group is initialised. Returns why the
    optimizer state was not loaded (the optimizer is then left as it was), or None.

    Raises:
        CheckpointError: it cannot be read safely.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    skipped = None
    if layout.optimizer_key is None:
        skipped = "it holds no optimizer state"
    else:
        missing = _missing_optimizer_params(folder, layout.optimizer_key, model)
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            skipped = (
                f"its optimizer state ('{layout.optimizer_key}') has none for parameter "
                f"{missing[0]}{more} (ampkit reads optimizer states keyed by parameter name, as "
                "get_optimizer_state_dict writes them)"
            )
    flat = False
    if skipped is None:
        first = next(name for name, _ in model.named_parameters())
        groups = f"{layout.optimizer_key}.param_groups.{first}."
        flat = any(k.startswith(groups) for k in _index(folder).state_dict_metadata)
        state = state_dicts(model, optimizer, flatten_optimizer=flat)
        model_state = state[MODEL]
    else:
        model_state = get_model_state_dict(model)
    load: dict[str, Any] = {MODEL: model_state} if layout.model_prefix else dict(model_state)
    if skipped is None:
        load[cast(str, layout.optimizer_key)] = state[OPTIMIZER]
    _load(load, folder)
    loaded = load[MODEL] if layout.model_prefix else {k: load[k] for k in model_state}
    if skipped is None:
        set_state_dict(
            model,
            optimizer,
            model_state_dict=loaded,
            optim_state_dict=state[OPTIMIZER],
            options=StateDictOptions(flatten_optimizer_state_dict=flat),
        )
    else:
        set_model_state_dict(model, loaded)
    return skipped

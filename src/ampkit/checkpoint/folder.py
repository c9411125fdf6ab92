"""Atomic, verified checkpoint folders: the on-disk format of a Trainer checkpoint.

A checkpoint is a folder ``step-00000100/`` in one of two layouts:

* ``full``: ``model.safetensors`` (the model's weights in fp32; loading runs no code) and
  ``state.pt`` (optimizer, scheduler, loss-scaler, trainer and data state, RNG states);
* ``sharded``: ``dcp/`` (model and optimizer written by ``torch.distributed.checkpoint``,
  each rank its own shards: ``dcp/.metadata`` and ``dcp/__<rank>_<n>.distcp``) and
  ``state.pt`` (everything else);

plus, in both, ``manifest.json`` (format version, layout, step, world size, data position,
tied-weight aliases, and a BLAKE3 digest and size per file) and ``COMPLETE``, written last, which
seals the manifest with its own BLAKE3 (format 4; :mod:`ampkit.checkpoint.manifest`); a folder
without it is never picked up. ``state.pt`` is loaded with ``torch.load(weights_only=True)``.

Writing is atomic, with one or many writers: rank 0 makes ``step-00000100.tmp-<pid>/``
(:func:`begin_checkpoint`), every writer puts its files there, then rank 0 hashes them, writes
the manifest and ``COMPLETE``, fsyncs and renames the folder into place with ``os.replace``
and fsyncs the parent (:func:`commit_checkpoint`). A process killed at any moment leaves either
the complete checkpoint or an ignored temporary folder; a save that fails (disk full, weights
that are not finite, tied tensors) removes its temporary folder. Loading verifies the manifest's
shape, that it lists exactly the files its layout requires, and every file's size and digest (SHA-256 in manifests before format 3),
so a malformed manifest or a truncated, appended-to, swapped or bit-flipped file is refused
with an error that names it. This module is the one place that knows manifests and markers;
it also tells a plain ``torch.distributed.checkpoint`` folder that ampkit did not write
(:func:`is_plain_dcp`) from an incomplete one of its own.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch

from ampkit._files import fsync_dir
from ampkit.checkpoint._digest import ALGORITHMS, FileDigest, file_digest, write_hashed
from ampkit.checkpoint.manifest import (
    FORMAT_VERSION,
    LAYOUTS,
    MANIFEST,
    MARKER,
    SHARDS,
    STATE,
    WEIGHTS,
    layout_problem,
    read_manifest,
    seal,
)
from ampkit.checkpoint.weights import (
    disk_full_error,
    native_path,
    nonfinite_names,
    read_file,
    refuse_nonfinite,
    write_weights_hashed,
)
from ampkit.errors import CheckpointError, ConfigurationError, DataError

__all__ = [
    "LAYOUTS",
    "SHARDS",
    "CheckpointInfo",
    "Weights",
    "abort_checkpoint",
    "begin_checkpoint",
    "checkpoint_step",
    "commit_checkpoint",
    "damaged_list",
    "find_checkpoints",
    "incomplete_writes",
    "is_plain_dcp",
    "latest_valid_checkpoint",
    "load_checkpoint",
    "load_state",
    "locate_checkpoints",
    "prune_checkpoints",
    "read_weights",
    "resolve_checkpoint",
    "serialise_state",
    "verify_checkpoint",
    "write_checkpoint",
]

_NAME = re.compile(r"^step-(\d{8,})$")
_WEIGHTS, _STATE, _MANIFEST, _MARKER = WEIGHTS, STATE, MANIFEST, MARKER


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint folder found on disk (not yet verified)."""

    path: Path
    step: int


def serialise_state(state: dict[str, Any]) -> bytes:
    """``state`` as the bytes of ``state.pt`` (``torch.save``)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


# -- writing -------------------------------------------------------------------------------------


def begin_checkpoint(folder: str | Path, step: int) -> Path:
    """Make the empty temporary folder the checkpoint of ``step`` is written into (rank 0).

    Raises:
        CheckpointError: a valid checkpoint of this step already exists (it is never
            overwritten; a damaged one is renamed to ``step-N.corrupt-<time>`` and kept).
    """
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    if final.exists():
        try:
            verify_checkpoint(final)
        except CheckpointError:
            # A damaged checkpoint that resume skipped: keep it for inspection, out of the way.
            final.rename(root / f"{final.name}.corrupt-{int(time.time())}")
        else:
            raise CheckpointError(
                f"save_checkpoint: {final} already exists; ampkit never overwrites a checkpoint. "
                "Resume from it (resume='auto') or write to another checkpoint folder."
            )
    tmp = root / f"{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def abort_checkpoint(tmp: str | Path) -> None:
    """Remove a temporary checkpoint folder after a failed write."""
    shutil.rmtree(tmp, ignore_errors=True)


def _files_under(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name not in (_MANIFEST, _MARKER)
    )


def _write_state(path: Path, state: dict[str, Any] | bytes) -> FileDigest:
    """Write ``state.pt`` (bytes as given, a dict streamed through ``torch.save``), hashed as
    it is written."""
    if isinstance(state, bytes):
        return write_hashed(path, state, atomic=False)
    # torch.save writes a CPU tensor's storage from its memory, which ``state`` holds for the
    # whole write: those records are hashed in the background, overlapping the fsync
    return write_hashed(
        path,
        lambda f: torch.save(state, f),  # type: ignore[arg-type]
        atomic=False,
        stable=_cpu_storages(state),
    )


def _cpu_storages(value: Any) -> set[tuple[int, int]]:
    """``(address, bytes)`` of the storages of the CPU tensors in ``value`` (nested)."""
    found: set[tuple[int, int]] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.device.type == "cpu" and type(item) in (torch.Tensor, torch.nn.Parameter):
                storage = item.untyped_storage()
                found.add((storage.data_ptr(), storage.nbytes()))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def commit_checkpoint(
    tmp: str | Path,
    step: int,
    state: dict[str, Any] | bytes | None,
    metadata: dict[str, Any] | None = None,
    *,
    layout: str = "full",
    digests: Mapping[str, FileDigest] | None = None,
    keep_last: int | None = None,
    keep: Collection[str | Path] = (),
) -> Path:
    """Finish a checkpoint whose weights are already in ``tmp`` (rank 0, after every writer
    is done): write ``state.pt`` (hashed as it is written), hash every other file, write the
    manifest and ``COMPLETE``, fsync and rename the folder into place. On any failure the
    temporary folder is removed.

    Args:
        digests: digest and size of files in ``tmp`` computed while writing them
            (``{"model.safetensors": ...}``); those files are not read again (their size on
            disk is checked). Every other file is read and hashed.
        keep_last: once committed, keep only the newest ``keep_last`` checkpoints and those
            in ``keep`` (:func:`prune_checkpoints`); None: keep all.

    Raises:
        StorageError: the disk is full.
        CheckpointError: the files in ``tmp`` are not those ``layout`` requires.
    """
    tmp = Path(tmp)
    final = tmp.parent / tmp.name.rsplit(".tmp-", 1)[0]
    try:
        known = dict(digests or {})
        if state is not None:
            known[_STATE] = _write_state(tmp / _STATE, state)
        manifest: dict[str, Any] = {"format": FORMAT_VERSION, "step": step, "layout": layout}
        manifest.update(metadata or {})
        manifest["files"] = {
            name: _entry(tmp / name, known.get(name)) for name in _files_under(tmp)
        }
        unseen = sorted(set(known) - set(manifest["files"]))
        if unseen:
            raise CheckpointError(
                f"checkpoint: {tmp} lacks {_some(unseen)}, which another process wrote and "
                "hashed: the processes do not share this folder, so nothing was kept of this "
                "write. Put the checkpoint folder on storage every process sees (a shared "
                "file system such as NFS or Lustre)."
            )
        problem = layout_problem(manifest["files"], layout)
        if problem:
            raise CheckpointError(f"checkpoint: {tmp} {problem}; nothing was kept of it.")
        # inside the temporary folder: each file fsynced, the folder renamed as a whole
        text = json.dumps(manifest, indent=2).encode()
        written = write_hashed(tmp / _MANIFEST, text, atomic=False)
        # covers the manifest, with the BLAKE3 its write computed
        write_hashed(tmp / _MARKER, seal(step, written), atomic=False)
        for sub in [tmp, *(p for p in tmp.iterdir() if p.is_dir())]:
            fsync_dir(sub)
        os.replace(tmp, final)
    except BaseException as exc:
        _fail(tmp, exc)
    fsync_dir(final.parent)
    if keep_last is not None:
        prune_checkpoints(final.parent, keep_last, keep=keep)
    return final


def _fail(tmp: Path, exc: BaseException) -> NoReturn:
    """Remove the temporary folder of a failed write and raise (a full disk: one line)."""
    abort_checkpoint(tmp)
    # torch.save reports a full disk in its stream as a RuntimeError caused by the OSError
    full = disk_full_error(exc, tmp)
    if full is not None:
        raise full from exc
    raise exc


def _some(names: Sequence[str]) -> str:
    """``a`` / ``a and b`` / ``a, b and 3 more`` (names in order)."""
    if len(names) <= 2:
        return " and ".join(names)
    return f"{names[0]}, {names[1]} and {len(names) - 2} more"


def _entry(file: Path, known: FileDigest | None) -> dict[str, Any]:
    size = file.stat().st_size
    if known is None:
        return FileDigest(file_digest(file), size).entry()
    if size != known.bytes:
        raise CheckpointError(
            f"checkpoint: {file} holds {size} bytes but {known.bytes} were written to it; "
            "nothing was kept of this write. Check the disk and write the checkpoint again."
        )
    return known.entry()


def write_checkpoint(
    folder: str | Path,
    step: int,
    weights: dict[str, torch.Tensor],
    state: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    *,
    keep_last: int | None = None,
    keep: Collection[str | Path] = (),
) -> Path:
    """Write the full-layout checkpoint of ``step`` atomically under ``folder``; return its path.

    The weights are streamed by :func:`~ampkit.checkpoint.weights.write_weights_hashed` into
    the temporary folder, which :func:`commit_checkpoint` then seals, streaming ``state.pt``
    through ``torch.save``; both files are hashed as they are written, never read back (a
    sharded checkpoint is the same begin/commit with DCP's files in between).

    Args:
        folder: the checkpoints folder (created if missing).
        step: optimizer steps done; names the checkpoint ``step-<8 digits>``.
        weights: model weights; stored as fp32 safetensors, tied tensors once (the aliases go
            into the manifest and are tied again on load).
        state: everything else (tensors, numbers, strings, lists, dicts only).
        metadata: extra JSON-ready facts for the manifest (precision, world size, ...).
        keep_last, keep: as :func:`commit_checkpoint`.

    Raises:
        NonFiniteWeightsError: a weight holds inf/NaN; nothing is written.
        CheckpointError: a valid checkpoint of this step already exists (it is never
            overwritten; a damaged one is renamed to ``step-N.corrupt-<time>`` and kept).
        StorageError: the disk is full (the temporary folder is removed).
    """
    refuse_nonfinite(nonfinite_names(weights), Path(folder) / f"step-{step:08d}")
    tmp = begin_checkpoint(folder, step)
    try:
        # the two files are written side by side: one's hashing and fsync overlap the other's
        with ThreadPoolExecutor(1, thread_name_prefix="ampkit-weights") as pool:
            weights_job = pool.submit(  # checked just above: not again
                write_weights_hashed, tmp / _WEIGHTS, weights, checked=True, atomic=False
            )
            try:
                state_digest = _write_state(tmp / _STATE, state)
            finally:
                wait([weights_job])
            aliases, weights_digest = weights_job.result()
    except BaseException as exc:
        _fail(tmp, exc)
    extra = {**(metadata or {}), **({"aliases": aliases} if aliases else {})}
    digests = {_WEIGHTS: weights_digest, _STATE: state_digest}
    return commit_checkpoint(
        tmp, step, None, extra, layout="full", digests=digests, keep_last=keep_last, keep=keep
    )


# -- finding and verifying -----------------------------------------------------------------------


def checkpoint_step(path: str | Path) -> int | None:
    """The step a ``step-NNNNNNNN`` folder's name says (None for any other name)."""
    match = _NAME.match(Path(path).name)
    return int(match.group(1)) if match else None


def find_checkpoints(folder: str | Path) -> list[CheckpointInfo]:
    """Complete checkpoints under ``folder``, oldest first (temporary folders are ignored)."""
    root = Path(folder)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _NAME.match(child.name)
        if match and child.is_dir() and (child / _MARKER).is_file():
            found.append(CheckpointInfo(path=child, step=int(match.group(1))))
    return sorted(found, key=lambda info: info.step)


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check a checkpoint folder against its manifest; return the manifest.

    A sharded checkpoint's DCP index (a pickle) is also read, with the allow-list of
    :mod:`ampkit.checkpoint.sharded`, so an index that would run code (or is not DCP's) fails
    verification, and ``resume="auto"`` passes over it to an earlier checkpoint.

    Raises:
        CheckpointError: the folder, marker or a file is missing; the manifest is malformed
            (not an object, wrong types, a file list other than its layout requires); a
            file's size or digest differs from the manifest (truncated, appended to, swapped
            or corrupted); or a sharded checkpoint's index is not plain DCP metadata; the
            message names the file.
    """
    folder = Path(path)
    if folder.is_file():
        raise CheckpointError(
            f"checkpoint: {folder} is a file, not a checkpoint folder. Pass a step-NNNNNNNN "
            "folder written by ampkit (e.g. ckpt/step-00000500)."
        )
    if not folder.is_dir():
        raise CheckpointError(
            f"checkpoint: {folder} does not exist. Pass a step-NNNNNNNN folder written by "
            "ampkit (e.g. ckpt/step-00000500)."
        )
    if not (folder / _MARKER).is_file():
        if is_plain_dcp(folder):
            raise CheckpointError(
                f"checkpoint: {folder} is a torch.distributed.checkpoint folder that ampkit did "
                "not write (a .metadata index, no manifest), so there is no manifest to verify "
                "it against. Resume from it with CheckpointConfig(resume=...) or export it "
                "with `ampkit checkpoint export`, which read it as it is."
            )
        if not _is_ampkit_folder(folder):
            raise CheckpointError(
                f"checkpoint: {folder} holds no checkpoint: neither ampkit's ({_MANIFEST}, "
                f"{_MARKER}) nor torch.distributed.checkpoint's (.metadata). Pass a "
                "step-NNNNNNNN folder written by ampkit or a DCP checkpoint folder."
            )
        raise CheckpointError(
            f"checkpoint: {folder} has no {_MARKER} marker, so it was not completely written. "
            "Resume from an earlier checkpoint."
        )
    manifest = read_manifest(folder)
    if manifest.get("layout") == "sharded":
        on_disk = {f"{SHARDS}/{name}" for name in _files_under(folder / SHARDS)}
        unlisted = sorted(on_disk - set(manifest["files"]))
        if unlisted:
            raise CheckpointError(
                f"checkpoint: {folder / unlisted[0]} is not in the manifest, so it cannot be "
                "verified. Resume from another checkpoint."
            )
    for name, expected in manifest["files"].items():
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint: {file} is missing. Resume from another checkpoint.")
        try:
            size = file.stat().st_size
            differs = [
                label
                for key, label in ALGORITHMS.items()
                if key in expected
                and (size != expected["bytes"] or file_digest(file, key) != expected[key])
            ]
        except OSError as exc:  # not a verdict on the file: say what failed
            raise CheckpointError(
                f"checkpoint: {file} could not be read ({exc.strerror or exc}), so it was not "
                "verified. Fix its permissions or storage, or resume from another checkpoint."
            ) from None
        if size != expected["bytes"] or differs:
            raise CheckpointError(
                f"checkpoint: {file} is corrupt ({size} bytes, expected {expected['bytes']}, "
                f"{' and '.join(differs)} differs from the manifest: truncated, appended to or "
                "bit-flipped). Resume from another checkpoint."
            )
    if manifest.get("layout") == "sharded":
        from ampkit.checkpoint.sharded import check_index

        # raises on an index that is not plain DCP metadata
        referenced = {f"{SHARDS}/{name}" for name in check_index(folder / SHARDS)}
        unlisted = sorted(referenced - set(manifest["files"]))
        if unlisted:
            raise CheckpointError(
                f"checkpoint: {folder} is incomplete: its index {SHARDS}/.metadata refers to "
                f"{_some(unlisted)}, which the manifest does not list (written by a process "
                "that did not share this folder?). Resume from another checkpoint."
            )
    _check_state(folder / _STATE, manifest)
    return manifest


def is_plain_dcp(path: str | Path) -> bool:
    """Whether ``path`` is a ``torch.distributed.checkpoint`` folder that ampkit did not
    write: DCP's ``.metadata`` index at its top, and neither a manifest nor ``COMPLETE`` (as
    ``dcp.save`` and torchtitan leave them)."""
    folder = Path(path)
    return (
        folder.is_dir()
        and (folder / ".metadata").is_file()
        and not (folder / _MANIFEST).exists()
        and not (folder / _MARKER).exists()
    )


def _is_ampkit_folder(folder: Path) -> bool:
    """Whether ``folder`` is (the start of) one of ampkit's checkpoints: a ``step-N`` or
    ``step-N.tmp-<pid>`` name, or any file a checkpoint holds."""
    if _NAME.match(folder.name) or re.match(r"^step-\d{8,}\.tmp-\d+$", folder.name):
        return True
    return any((folder / name).exists() for name in (_MANIFEST, _WEIGHTS, _STATE, SHARDS))


def _check_state(file: Path, manifest: Mapping[str, Any]) -> None:
    """Refuse a ``state.pt`` whose pickle is not plain data, reading only the pickle: the
    tensors are memory-mapped, not read, so this costs little even for a large optimizer
    state, and ``resume="auto"`` passes such a checkpoint over like a damaged one. The step
    and the number of RNG states it records (a Trainer's ``trainer.step`` and ``rng``, one per
    process) must be the manifest's step and world size: verification and a resume read the
    same facts and agree.

    Raises:
        CheckpointError: the pickle refers to anything but tensors, numbers, strings and
            containers (a file made to run code when loaded), or is not a torch file; it
            disagrees with the manifest; or it cannot be read (the reason says what failed,
            not that the file was altered).
    """
    try:
        with native_path(file) as name:
            state = torch.load(name, map_location="cpu", weights_only=True, mmap=True)
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint: {file} could not be read ({exc.strerror or exc}), so it was not "
            "verified. Fix its permissions or storage, or resume from another checkpoint."
        ) from None
    except Exception as exc:  # UnpicklingError / RuntimeError variants
        raise CheckpointError(
            f"checkpoint: {file} could not be loaded safely ({_unsafe_content(exc)}); ampkit "
            "loads checkpoints as plain data and never runs code stored in them. It was not "
            "written by ampkit or was altered; resume from another checkpoint."
        ) from None
    problem = _state_problem(state, manifest)
    if problem:
        raise CheckpointError(
            f"checkpoint: {file} {problem}, so the two files are not of one checkpoint. "
            "Resume from another checkpoint."
        )


def _state_problem(state: Any, manifest: Mapping[str, Any]) -> str | None:
    """How a loaded ``state.pt`` disagrees with its manifest, or None."""
    if not isinstance(state, dict):
        return f"holds a {type(state).__name__}, not the state of a run"
    trainer = state.get("trainer")
    if isinstance(trainer, dict) and "step" in trainer and trainer["step"] != manifest["step"]:
        return f"records step {trainer['step']!r} but its manifest step {manifest['step']}"
    rng, world = state.get("rng"), manifest.get("world_size")
    if isinstance(rng, list) and world is not None and len(rng) != world:
        return f"holds {len(rng)} RNG states (one per process) but its manifest world size {world}"
    return None


# -- loading -------------------------------------------------------------------------------------


def _unsafe_content(exc: BaseException) -> str:
    match = re.search(r"GLOBAL (\S+) was not an allowed global", str(exc))
    return f"it refers to {match.group(1)}" if match else "it is not plain tensors and containers"


def load_state(path: str | Path) -> dict[str, Any]:
    """``state.pt`` of a verified checkpoint, loaded without running stored code.

    Raises:
        CheckpointError: it holds anything but tensors, numbers, strings and containers.
    """
    file = Path(path) / _STATE
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError/RuntimeError variants here
        # torch's message suggests weights_only=False; ampkit never loads that way
        raise CheckpointError(
            f"checkpoint: {file} could not be loaded safely ({_unsafe_content(exc)}); ampkit "
            "loads checkpoints as plain data and never runs code stored in them. It was not "
            "written by ampkit or was altered; resume from another checkpoint."
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"checkpoint: {file} holds a {type(state).__name__}, not the state of a run. "
            "Resume from another checkpoint."
        )
    return state


def _checkpoint_weights(folder: Path, manifest: dict) -> dict[str, torch.Tensor]:
    """The full fp32 weights of a verified checkpoint folder, ties restored (a sharded one is
    consolidated in this process, without a process group)."""
    aliases = manifest.get("aliases", {})
    if manifest.get("layout", "full") == "full":
        return read_file(folder / _WEIGHTS, aliases)[0]
    from ampkit.checkpoint.sharded import read_model_weights

    weights = read_model_weights(folder / SHARDS)
    for name, target in aliases.items():
        if target in weights:
            weights[name] = weights[target]
    return weights


def load_checkpoint(
    path: str | Path,
) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any], dict]:
    """Verify a checkpoint and load it: ``(fp32 weights, state, manifest)``, tied weights tied
    again (both names hold the same tensor). Runs no stored code. The weights are None for a
    sharded checkpoint, whose shards each rank loads itself
    (:func:`ampkit.checkpoint.sharded.load_into`); :func:`read_weights` consolidates them.

    Raises:
        CheckpointError: as :func:`verify_checkpoint`, or the state cannot be read safely.
    """
    folder = Path(path)
    manifest = verify_checkpoint(folder)
    weights = None
    if manifest.get("layout", "full") == "full":
        weights = _checkpoint_weights(folder, manifest)
    return weights, load_state(folder), manifest


@dataclass(frozen=True)
class Weights:
    """Model weights read by :func:`read_weights`.

    Attributes:
        tensors: ``name -> tensor``, floating-point ones in fp32; tied names hold the same
            tensor.
        aliases: the tied names, ``{name: the name whose tensor it shares}``.
        source: what was read: the safetensors file, or the checkpoint folder.
        metadata: the safetensors file's header entries besides the aliases (the Trainer's
            final weights record ``precision``); empty for a checkpoint folder.
        manifest: the checkpoint's verified manifest; None for a plain safetensors file.
    """

    tensors: dict[str, torch.Tensor]
    aliases: dict[str, str]
    source: Path
    metadata: dict[str, str]
    manifest: dict[str, Any] | None


def _is_checkpoint(path: Path) -> bool:
    return (
        _NAME.match(path.name) is not None
        or (path / _MANIFEST).exists()
        or (path / _MARKER).exists()
    )


def _fp32(
    tensors: dict[str, torch.Tensor], aliases: Mapping[str, str]
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Floating-point tensors in fp32, each tie converted once and tied again; the ties that
    hold (both names present)."""
    tied = {
        name: target
        for name, target in aliases.items()
        if name in tensors and target in tensors and target not in aliases
    }
    out = {
        name: t.float() if t.is_floating_point() else t
        for name, t in tensors.items()
        if name not in tied
    }
    for name, target in tied.items():
        out[name] = out[target]
    return {name: out[name] for name in tensors}, tied


def read_weights(path: str | Path) -> Weights:
    """Read model weights from a ``.safetensors`` file, a checkpoint folder of either layout
    (verified against its manifest first; a sharded one is consolidated in this process,
    without a process group), a ``torch.distributed.checkpoint`` folder that ampkit did not
    write (its model weights, consolidated; no manifest to verify) or a run folder (its final
    ``model.safetensors``, as ``ampkit train --out`` writes it). The one weights reader;
    loading runs no stored code.

    Raises:
        ConfigurationError: nothing is there, or a folder holds neither a checkpoint nor
            ``model.safetensors`` (exit 2: an input that cannot be used).
        DataError: a file given as weights is not readable safetensors (exit 2).
        CheckpointError: a checkpoint folder fails verification (damaged manifest, a missing,
            truncated or altered file, no ``COMPLETE``).
    """
    given = Path(path)
    if is_plain_dcp(given):
        from ampkit.checkpoint.sharded import plain_layout, read_plain_model_weights

        raw = read_plain_model_weights(given, plain_layout(given))
        return Weights(_fp32(raw, {})[0], {}, given, {}, None)
    if given.is_dir() and _is_checkpoint(given):
        manifest = verify_checkpoint(given)
        tensors, aliases = _fp32(_checkpoint_weights(given, manifest), manifest.get("aliases", {}))
        return Weights(tensors, aliases, given, {}, manifest)
    file = given / _WEIGHTS if given.is_dir() else given
    if not file.is_file():
        where = f"{given} holds no {_WEIGHTS}" if given.is_dir() else f"{given} does not exist"
        raise ConfigurationError(
            f"checkpoint: {where}. Pass a run folder (ampkit train --out DIR), a checkpoint "
            "folder (DIR/checkpoints/step-NNNNNNNN) or a .safetensors file."
        )
    try:
        raw, recorded, metadata = read_file(file)
    except CheckpointError as exc:  # a file given as weights that is not safetensors: an input
        raise DataError(str(exc)) from None
    tensors, aliases = _fp32(raw, recorded)
    return Weights(tensors, aliases, file, metadata, None)


def latest_valid_checkpoint(
    folder: str | Path,
) -> tuple[CheckpointInfo | None, list[CheckpointError]]:
    """The newest checkpoint that verifies, and the errors of newer ones that did not."""
    problems: list[CheckpointError] = []
    for info in reversed(find_checkpoints(folder)):
        try:
            verify_checkpoint(info.path)
        except CheckpointError as exc:
            problems.append(exc)
        else:
            return info, problems
    return None, problems


def damaged_list(problems: Sequence[BaseException]) -> str:
    """``N damaged: reason; reason; ...`` for every damaged checkpoint, newest first."""
    return f"{len(problems)} damaged: " + "; ".join(str(p) for p in problems)


def locate_checkpoints(path: str | Path, *, incomplete: bool = False) -> tuple[str, Path]:
    """What ``path`` names, as every command that takes a run reads it: ``("plain", path)``, a
    ``torch.distributed.checkpoint`` folder ampkit did not write; ``("one", path)``, one
    checkpoint folder (a ``step-N`` name, a manifest or ``COMPLETE`` inside; or a file, which
    verification refuses); or ``("root", folder)``, the folder holding the checkpoints: ``path``
    itself (a checkpoints folder) or ``path/checkpoints`` (a run folder), the first with a
    complete checkpoint (``incomplete=True``: or an incomplete write).

    Raises:
        ConfigurationError: nothing is at ``path``, or it holds no checkpoint (the message
            says where it looked).
    """
    given = Path(path)
    looked = (
        f"looked for a step-NNNNNNNN checkpoint folder at {given}, or checkpoints in {given} "
        f"(a checkpoints folder) and in {given / 'checkpoints'} (a run folder)"
    )
    if not given.exists():
        raise ConfigurationError(
            f"checkpoint: {given} does not exist ({looked}). Pass a run folder (ampkit train "
            "--out DIR), its checkpoints folder or one step-NNNNNNNN folder."
        )
    if is_plain_dcp(given):
        return "plain", given
    named = _NAME.match(given.name) is not None
    if not given.is_dir() or named or (given / _MANIFEST).exists() or (given / _MARKER).exists():
        return "one", given
    for root in (given, given / "checkpoints"):
        if find_checkpoints(root) or (incomplete and incomplete_writes(root)):
            return "root", root
    raise ConfigurationError(
        f"checkpoint: {given} holds no checkpoint ({looked}). Pass a run folder (with "
        "checkpoints/), a checkpoints folder or a step-NNNNNNNN folder."
    )


def incomplete_writes(folder: str | Path) -> list[Path]:
    """The ``step-N.tmp-<pid>`` folders under ``folder``: writes not (yet) committed, never
    loaded."""
    root = Path(folder)
    return sorted(p for p in root.glob("step-*.tmp-*") if p.is_dir()) if root.is_dir() else []


def resolve_checkpoint(path: str | Path) -> tuple[Path, list[CheckpointError]]:
    """The checkpoint folder ``path`` names: a ``step-N`` folder itself, else the newest valid
    checkpoint in ``path`` (a checkpoints folder) or in ``path/checkpoints`` (a run folder);
    with the errors of newer damaged ones it skipped.

    Raises:
        ConfigurationError: nothing is at ``path``, or it holds no checkpoint (the message
            says where it looked).
        CheckpointError: a ``step-N`` folder fails verification, or there are checkpoints but
            none is valid (the reason of every damaged one is listed).
    """
    kind, found = locate_checkpoints(path)
    if kind == "plain":
        return found, []
    if kind == "one":
        verify_checkpoint(found)
        return found, []
    info, problems = latest_valid_checkpoint(found)
    if info is None:
        raise CheckpointError(
            f"checkpoint: no valid checkpoint in {found} ({damaged_list(problems)})"
        )
    return info.path, problems


def prune_checkpoints(
    folder: str | Path, keep_last: int, *, keep: Collection[str | Path] = ()
) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete checkpoints (and those in ``keep``),
    and stale temporaries.

    Returns the deleted folders. Temporary ``*.tmp-<pid>`` folders of other (dead) writers
    are removed too; this process's own, which an asynchronous write may still be filling,
    are kept.
    """
    if keep_last < 1:
        raise CheckpointError(f"keep_last: {keep_last} is invalid. Keep at least 1 checkpoint.")
    root = Path(folder)
    removed = []
    kept = {Path(path).name for path in keep}
    for info in find_checkpoints(root)[:-keep_last]:
        if info.path.name in kept:
            continue
        _remove(info.path)
        removed.append(info.path)
    for child in incomplete_writes(root):
        if child.name.endswith(f".tmp-{os.getpid()}"):
            continue
        shutil.rmtree(child, ignore_errors=True)
        removed.append(child)
    return removed


def _remove(path: Path) -> None:
    """Delete a checkpoint folder without following links (a linked ``step-N`` loses its link,
    never its target), tolerating files another process removes meanwhile."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
        return

    def vanished(_func: Any, _name: Any, exc: Any) -> None:
        error = exc[1] if isinstance(exc, tuple) else exc
        if not isinstance(error, FileNotFoundError):
            raise error

    # rmtree never follows a link inside the folder; the handler sees each failed removal
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=vanished)
    else:
        shutil.rmtree(path, onerror=vanished)

"""Atomic, verified checkpoint folders: the on-disk format of a Trainer checkpoint.

A checkpoint is a folder ``step-00000100/`` holding:

* ``model.safetensors``: the model's weights in fp32 (safetensors: loading runs no code);
* ``state.pt``: optimizer, scheduler, loss-scaler and trainer state and RNG states, loaded with
  ``torch.load(weights_only=True)`` (no code execution);
* ``manifest.json``: the step, format version and a SHA-256 and size per file;
* ``COMPLETE``: written last; a folder without it is never picked up.

Writing is atomic: everything goes into ``step-00000100.tmp-<pid>/``, each file is fsynced, the
folder is renamed into place with ``os.replace`` and the parent folder is fsynced. A process
killed at any moment leaves either the complete checkpoint or an ignored temporary folder.
Loading verifies every file against the manifest, so a truncated, appended-to or bit-flipped
file is refused with an error that names it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ampkit._files import atomic_write, fsync_dir
from ampkit.errors import CheckpointError

__all__ = [
    "CheckpointInfo",
    "find_checkpoints",
    "latest_valid_checkpoint",
    "load_checkpoint",
    "prune_checkpoints",
    "save_checkpoint",
    "verify_checkpoint",
]

FORMAT_VERSION = 1
_NAME = re.compile(r"^step-(\d{8,})$")
_WEIGHTS, _STATE, _MANIFEST, _MARKER = "model.safetensors", "state.pt", "manifest.json", "COMPLETE"


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint folder found on disk (not yet verified)."""

    path: Path
    step: int


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _serialise_state(state: dict[str, Any]) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def save_checkpoint(
    folder: str | Path,
    step: int,
    weights: dict[str, torch.Tensor],
    state: dict[str, Any],
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of ``step`` atomically under ``folder``; return its path.

    Args:
        folder: the checkpoints folder (created if missing).
        step: optimizer steps done; names the checkpoint ``step-<8 digits>``.
        weights: model weights; stored as fp32 safetensors.
        state: everything else (tensors, numbers, strings, lists, dicts only).
        metadata: extra JSON-ready facts for the manifest (precision, world size, ...).

    Raises:
        CheckpointError: a valid checkpoint of this step already exists (it is never
            overwritten; a damaged one is renamed to ``step-N.corrupt-<time>`` and kept).
    """
    from safetensors.torch import save as save_safetensors

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
    fp32 = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in weights.items()}
    files = {_WEIGHTS: save_safetensors(fp32), _STATE: _serialise_state(state)}
    manifest: dict[str, Any] = {"format": FORMAT_VERSION, "step": step, "files": {}}
    manifest.update(metadata or {})
    for name, data in files.items():
        atomic_write(tmp / name, data)
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    atomic_write(tmp / _MANIFEST, json.dumps(manifest, indent=2).encode())
    atomic_write(tmp / _MARKER, f"{step}\n".encode())
    fsync_dir(tmp)
    os.replace(tmp, final)
    fsync_dir(root)
    return final


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

    Raises:
        CheckpointError: the folder, marker or a file is missing, or a file's size or SHA-256
            differs from the manifest (truncated, appended to, or corrupted); the message names
            the file.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(
            f"checkpoint: {folder} does not exist or is not a folder. Pass a step-NNNNNNNN "
            "folder written by ampkit, or resume='auto'."
        )
    if not (folder / _MARKER).is_file():
        raise CheckpointError(
            f"checkpoint: {folder} has no {_MARKER} marker, so it was not completely written. "
            "Resume from an earlier checkpoint."
        )
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint: {folder / _MANIFEST} is missing or unreadable ({exc}). "
            "Resume from an earlier checkpoint."
        ) from None
    for name, expected in manifest.get("files", {}).items():
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint: {file} is missing. Resume from another checkpoint.")
        size = file.stat().st_size
        if size != expected["bytes"] or _sha256(file) != expected["sha256"]:
            raise CheckpointError(
                f"checkpoint: {file} is corrupt ({size} bytes, expected {expected['bytes']}, "
                "SHA-256 differs from the manifest: truncated, appended to or bit-flipped). "
                "Resume from another checkpoint."
            )
    return manifest


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict]:
    """Verify and load a checkpoint: ``(fp32 weights, state, manifest)``. Runs no stored code.

    Raises:
        CheckpointError: as :func:`verify_checkpoint`, or the state cannot be read safely.
    """
    from safetensors.torch import load_file

    folder = Path(path)
    manifest = verify_checkpoint(folder)
    weights = load_file(str(folder / _WEIGHTS))
    try:
        state = torch.load(folder / _STATE, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError/RuntimeError variants here
        raise CheckpointError(
            f"checkpoint: {folder / _STATE} could not be loaded safely ({exc}). "
            "Resume from another checkpoint."
        ) from exc
    return weights, state, manifest


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


def prune_checkpoints(folder: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete checkpoints, and stale temporaries.

    Returns the deleted folders. Temporary ``*.tmp-<pid>`` folders of dead writers are removed
    too; the current process's own temporary folder never exists between saves.
    """
    if keep_last < 1:
        raise CheckpointError(f"keep_last: {keep_last} is invalid. Keep at least 1 checkpoint.")
    root = Path(folder)
    removed = []
    for info in find_checkpoints(root)[:-keep_last]:
        shutil.rmtree(info.path)
        removed.append(info.path)
    for child in root.glob("step-*.tmp-*") if root.is_dir() else []:
        shutil.rmtree(child, ignore_errors=True)
        removed.append(child)
    return removed

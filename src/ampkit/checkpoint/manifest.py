"""A checkpoint's manifest: read safely, sealed by its ``COMPLETE`` marker, checked field by field.

The manifest (``manifest.json``) lists every file of a checkpoint with its size and digest;
since format 4 the manifest itself is covered too: ``COMPLETE``, written last, records the
BLAKE3 of the manifest's exact bytes (:func:`seal`)::

    100
    manifest blake3 <64 hex digits>

so a manifest edited after the write (an alias added, ``config.keep_last`` changed, a file's
digest "fixed" to match a swapped file) is refused like a damaged file, and ``resume="auto"``
falls back to an earlier checkpoint. Manifests of formats 1-3 have a marker holding the step
alone; they are still read (their files are still checked against them).

:func:`read_manifest` is the one reader, used by verification and by every load: the marker and
the manifest are read only when they are regular files below a size cap (a FIFO, a link to
``/dev/zero`` or a huge file is refused at once), the JSON's nesting is bounded before it is
parsed, and every field a load reads is type-checked (:func:`manifest_problem`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ampkit._files import load_json, read_regular
from ampkit._validate import is_int
from ampkit.checkpoint._digest import ALGORITHMS, DIGEST, HEX_DIGEST, FileDigest, new_hash
from ampkit.errors import CheckpointError

__all__ = [
    "FORMAT_VERSION",
    "LAYOUTS",
    "MANIFEST",
    "MANIFEST_LIMIT",
    "MARKER",
    "MAX_DEPTH",
    "READABLE",
    "SHARDS",
    "STATE",
    "WEIGHTS",
    "layout_problem",
    "manifest_problem",
    "read_manifest",
    "seal",
]

FORMAT_VERSION = 4
#: Manifest formats this version reads (1: before layouts and aliases, always ``full``; 1 and
#: 2 hash files with SHA-256, 3 and 4 with BLAKE3; 4: the manifest sealed by ``COMPLETE``).
READABLE = (1, 2, 3, 4)
#: The checkpoint layouts: full (gathered) weights, or DCP shards written by every rank.
LAYOUTS = ("full", "sharded")
#: The folder of a sharded checkpoint that ``torch.distributed.checkpoint`` writes into.
SHARDS = "dcp"
WEIGHTS, STATE, MANIFEST, MARKER = "model.safetensors", "state.pt", "manifest.json", "COMPLETE"
#: The largest manifest read (a sharded checkpoint of 10,000 ranks lists about 2 MB).
MANIFEST_LIMIT = 64 << 20
#: The largest ``COMPLETE`` marker read.
_MARKER_LIMIT = 4096
#: The deepest nesting of arrays and objects a manifest may have (ampkit writes 4 or 5).
MAX_DEPTH = 64
_NAME = re.compile(r"^step-(\d{8,})$")
_SHARD_FILE = re.compile(rf"^{SHARDS}/(\.metadata|__\d+_\d+\.distcp)$")
_SEAL = re.compile(rf"^manifest {DIGEST} ([0-9a-f]{{64}})$")
_STRATEGIES = ("replicated", "fsdp")


def _digest(data: bytes) -> str:
    hasher = new_hash(DIGEST)
    hasher.update(data)
    return str(hasher.hexdigest())


def seal(step: int, manifest: bytes | FileDigest) -> bytes:
    """The ``COMPLETE`` marker of a checkpoint of ``step`` whose manifest is ``manifest``: its
    bytes, or the :class:`FileDigest` that writing them returned (so they are not hashed
    twice).

    Raises:
        ValueError: the digest is not of :data:`DIGEST`.
    """
    if isinstance(manifest, bytes):
        hexdigest = _digest(manifest)
    elif manifest.algorithm == DIGEST:
        hexdigest = manifest.hexdigest
    else:
        raise ValueError(
            f"seal: the manifest's digest is {manifest.algorithm}; COMPLETE records {DIGEST}."
        )
    return f"{step}\nmanifest {DIGEST} {hexdigest}\n".encode()


def _read(file: Path, limit: int) -> bytes:
    try:
        return read_regular(file, limit)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CheckpointError(
            f"checkpoint: {file} could not be read ({reason}). Resume from another checkpoint."
        ) from None


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of the checkpoint folder ``folder`` (its ``COMPLETE`` marker present),
    checked against the marker's seal and for the shape and types of every field a load reads.

    Raises:
        CheckpointError: the marker or manifest is not a readable regular file below the size
            cap; the manifest is not JSON, nests too deeply, differs from the one sealed in
            ``COMPLETE``, lacks a seal its format requires, or has a malformed field (the
            message names the file and what is wrong).
    """
    marker = _read(folder / MARKER, _MARKER_LIMIT)
    raw = _read(folder / MANIFEST, MANIFEST_LIMIT)
    lines = marker.decode("ascii", "replace").splitlines()
    sealed = [match.group(1) for line in lines if (match := _SEAL.match(line))]
    if sealed and sealed[0] != _digest(raw):
        raise CheckpointError(
            f"checkpoint: {folder / MANIFEST} is damaged: its BLAKE3 differs from the one "
            f"{MARKER} recorded when the checkpoint was written, so it was edited or corrupted "
            "since. Resume from another checkpoint."
        )
    try:
        manifest = load_json(raw, MAX_DEPTH)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(
            f"checkpoint: {folder / MANIFEST} is unreadable ({exc}). "
            "Resume from an earlier checkpoint."
        ) from None
    problem = manifest_problem(manifest, folder)
    if problem is None and not sealed and manifest["format"] >= 4:
        problem = (
            f"has format {manifest['format']}, whose {MARKER} records the manifest's digest, "
            f"but {MARKER} records none"
        )
    if problem:
        raise CheckpointError(
            f"checkpoint: {folder / MANIFEST} is damaged: it {problem}. "
            "Resume from another checkpoint."
        )
    return dict(manifest)


def layout_problem(files: Mapping[str, Any], layout: str) -> str | None:
    """What is wrong with a manifest's file list for ``layout``, or None."""
    names = set(files)
    if layout == "full":
        if names != {WEIGHTS, STATE}:
            return f"lists {sorted(names)} but a full checkpoint holds exactly {[WEIGHTS, STATE]}"
        return None
    shards = {n for n in names if _SHARD_FILE.match(n)}
    if names - shards != {STATE} or f"{SHARDS}/.metadata" not in shards or len(shards) < 2:
        return (
            f"lists {sorted(names)} but a sharded checkpoint holds exactly {STATE}, "
            f"{SHARDS}/.metadata and the {SHARDS}/__<rank>_<n>.distcp files"
        )
    return None


def _run_fields_problem(manifest: Mapping[str, Any]) -> str | None:
    """What is wrong with the run facts a resume reads (world size, strategy, ...), or None."""
    checks = [
        ("world_size", lambda v: is_int(v, 1), "an integer >= 1"),
        ("batch_size", lambda v: v is None or is_int(v, 1), "an integer >= 1 or null"),
        ("samples_consumed", lambda v: v is None or is_int(v, 0), "an integer >= 0 or null"),
        ("precision", lambda v: isinstance(v, str), "a string"),
        ("strategy", lambda v: v in _STRATEGIES, f"one of {list(_STRATEGIES)}"),
        ("config", lambda v: isinstance(v, dict), "an object"),
    ]
    for key, valid, allowed in checks:
        if key in manifest and not valid(manifest[key]):
            return f"has {key}={manifest[key]!r}; it must be {allowed}"
    return None


def manifest_problem(manifest: Any, folder: Path) -> str | None:
    """What is wrong with the shape of a manifest, or None."""
    if not isinstance(manifest, dict):
        return f"is a JSON {type(manifest).__name__}, not an object"
    if manifest.get("format") not in READABLE or isinstance(manifest.get("format"), bool):
        return f"has format {manifest.get('format')!r}; this ampkit reads {list(READABLE)}"
    step = manifest.get("step")
    match = _NAME.match(folder.name)
    if not is_int(step, 0) or (match and int(match.group(1)) != step):
        return f"has step {step!r}, which does not match the folder name {folder.name}"
    layout = manifest.get("layout", "full")
    if layout not in LAYOUTS:
        return f"has layout {layout!r}; it must be one of {list(LAYOUTS)}"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return f"has files={type(files).__name__}, not an object of name -> digest and bytes"
    for name, entry in files.items():
        if not isinstance(entry, dict) or not is_int(entry.get("bytes"), 0):
            return f"has no valid byte count for {name!r}"
        digests = [key for key in ALGORITHMS if key in entry]
        if not digests:
            return f"has no digest ({' or '.join(ALGORITHMS.values())}) for {name!r}"
        for key in digests:
            if not isinstance(entry[key], str) or not HEX_DIGEST.match(entry[key]):
                return f"has no valid {ALGORITHMS[key]} for {name!r}"
    aliases = manifest.get("aliases", {})
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in aliases.items()
    ):
        return "has aliases that are not an object of name -> name"
    return _run_fields_problem(manifest) or layout_problem(files, layout)

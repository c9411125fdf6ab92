"""fp32 safetensors weights as ampkit writes them: tied tensors once, never inf/NaN.

safetensors refuses tensors that share memory ("Some tensors share memory"), which every model
with tied weights has (GPT-2, BERT and T5 tie ``lm_head.weight`` to the token embedding). The
weights are stored with each tie once; the dropped names go into the file's metadata under
``ampkit.aliases`` (``{"lm_head.weight": "transformer.wte.weight"}``) and are tied again on
load, so a restored model shares the memory as before. ``safetensors.torch.load_model`` also
restores such a file into a tied model.

Weights holding inf or NaN are refused with :class:`~ampkit.errors.NonFiniteWeightsError`
before anything is written, so a finite checkpoint is never followed by a non-finite one.

The file is streamed: the safetensors header (JSON, padded to 8 bytes, as safetensors writes
it) and then each tensor's bytes straight from its memory (converted to fp32 one tensor at a
time), hashed as they are written, so a save holds no second copy of the weights and the
checkpoint's manifest needs no re-read. The bytes are those ``safetensors.torch.save`` writes
for the same tensors and metadata (ampkit writes metadata keys sorted; safetensors orders
several as its hash map does).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch

from ampkit._files import is_disk_full
from ampkit.checkpoint._digest import FileDigest, HashingWriter, write_hashed
from ampkit.errors import CheckpointError, NonFiniteWeightsError, StorageError

__all__ = [
    "ALIASES_KEY",
    "disk_full_error",
    "find_aliases",
    "native_path",
    "nonfinite_names",
    "read_file",
    "refuse_nonfinite",
    "weights_bytes",
    "write_weights",
    "write_weights_hashed",
]

ALIASES_KEY = "ampkit.aliases"


def disk_full_error(exc: BaseException, target: str | Path) -> StorageError | None:
    """A one-line :class:`~ampkit.StorageError` when ``exc`` is a full disk (or quota) while
    writing ``target``; None for any other error."""
    if not is_disk_full(exc):
        return None
    return StorageError(
        f"checkpoint: the disk is full while writing {target} (no space left on device); "
        "nothing was kept of this write. Free space there, lower keep_last (--keep-last), or "
        "write to another disk."
    )


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)  # a DTensor: this rank's shard
    return to_local() if callable(to_local) else tensor


def nonfinite_names(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding inf or NaN (a DTensor: this rank's shard).

    One fused pass: each tensor's ``aminmax`` (a reduction that allocates nothing the size of
    the tensor; NaN propagates into both, inf shows in the max, -inf in the min), stacked, and
    one device synchronisation per device for all of them.
    """
    by_device: dict[torch.device, list[str]] = {}
    for name, tensor in tensors.items():
        local = _local(tensor)
        if local.is_floating_point() and local.numel():
            by_device.setdefault(local.device, []).append(name)
    bad: set[str] = set()
    for names in by_device.values():
        with torch.no_grad():
            ends = torch.stack(
                [torch.stack(_local(tensors[k]).detach().aminmax()).float() for k in names]
            )
            flags = torch.isfinite(ends).all(dim=1).tolist()
        bad.update(name for name, ok in zip(names, flags, strict=True) if not ok)
    return [name for name in tensors if name in bad]


def refuse_nonfinite(bad: list[str], target: str | Path) -> None:
    """Raise :class:`NonFiniteWeightsError` naming the tensors in ``bad``, if any."""
    if bad:
        more = ", ..." if len(bad) > 3 else ""
        raise NonFiniteWeightsError(
            f"checkpoint: refusing to write {target}: {len(bad)} weight tensor(s) hold inf/NaN "
            f"({', '.join(bad[:3])}{more}). Nothing was written, so the newest checkpoint "
            "stays a finite one. Resume from it with a lower learning rate."
        )


def _storage_key(tensor: torch.Tensor) -> tuple:
    local = _local(tensor)
    return (
        local.device,
        local.untyped_storage().data_ptr(),
        local.storage_offset(),
        tuple(local.shape),
        tuple(local.stride()),
        local.dtype,
    )


def find_aliases(tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Tied tensors: ``{name: the first name holding the same tensor}`` for every later name
    whose tensor has the same memory, shape and strides (``lm_head.weight`` ->
    ``transformer.wte.weight``)."""
    first: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in tensors.items():
        if not _local(tensor).numel():
            continue
        key = _storage_key(tensor)
        if key in first:
            aliases[name] = first[key]
        else:
            first[key] = name
    return aliases


def _unique(
    weights: Mapping[str, torch.Tensor], aliases: Mapping[str, str] | None
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(the tensors to store, aliases)``: every tie once, as given (not yet fp32)."""
    found = {**find_aliases(weights), **(aliases or {})}
    found = {name: to for name, to in found.items() if name in weights and to in weights}
    return {name: t for name, t in weights.items() if name not in found}, found


def _fp32(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", torch.float32).contiguous()


def _unique_fp32(
    weights: Mapping[str, torch.Tensor], aliases: Mapping[str, str] | None
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    stored, found = _unique(weights, aliases)
    out: dict[str, torch.Tensor] = {}
    storages: set[tuple[torch.device, int]] = set()
    for name, tensor in stored.items():
        fp32 = _fp32(tensor)
        key = (fp32.device, fp32.untyped_storage().data_ptr())
        if fp32.numel() and key in storages:  # overlapping views that are not one tensor
            fp32 = fp32.clone()
        storages.add((fp32.device, fp32.untyped_storage().data_ptr()))
        out[name] = fp32
    return out, found


def _metadata(found: Mapping[str, str], metadata: Mapping[str, str] | None) -> dict[str, str]:
    extra = dict(metadata or {})
    if found:
        extra[ALIASES_KEY] = json.dumps(found, sort_keys=True)
    return extra


def weights_bytes(
    weights: Mapping[str, torch.Tensor],
    aliases: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> tuple[bytes, dict[str, str]]:
    """``(safetensors bytes in fp32, aliases)``: each tie stored once, the aliases (found by
    memory, plus those given) recorded in the metadata. Builds the whole file in memory;
    :func:`write_weights` streams the same bytes to disk instead."""
    from safetensors.torch import save

    stored, found = _unique_fp32(weights, aliases)
    extra = _metadata(found, metadata)
    return save(stored, metadata=extra or None), found


def _header(stored: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> tuple[bytes, list]:
    """The safetensors header of fp32 ``stored`` (length prefix, JSON, space padding to 8
    bytes) as safetensors writes it: metadata first, tensors by name; and the names in file
    order."""
    order = sorted(stored)
    entries: dict[str, object] = {}
    if metadata:
        entries["__metadata__"] = {key: metadata[key] for key in sorted(metadata)}
    offset = 0
    for name in order:
        size = stored[name].numel() * 4
        shape = list(stored[name].shape)
        entries[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, order


def _stream(
    file: HashingWriter, stored: Mapping[str, torch.Tensor], metadata: Mapping[str, str]
) -> None:
    header, order = _header(stored, metadata)
    file.write(header)
    for name in order:
        fp32 = _fp32(stored[name])  # a copy only when not already fp32 on the CPU
        if fp32.numel():
            file.write(fp32.numpy(), stable=True)  # the view holds the tensor until hashed


def write_weights_hashed(
    path: str | Path,
    weights: Mapping[str, torch.Tensor],
    *,
    aliases: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
    checked: bool = False,
    atomic: bool = True,
) -> tuple[dict[str, str], FileDigest]:
    """:func:`write_weights`, also returning the digest and size of the file as written
    (computed while writing, for a checkpoint's manifest). ``checked=True``: the caller has
    just refused non-finite ``weights`` itself (:func:`nonfinite_names`), so they are not
    scanned twice. ``atomic=False``: written in place and fsynced, for a file in a
    checkpoint's temporary folder (renamed into place as a whole).

    Raises:
        NonFiniteWeightsError: a weight holds inf/NaN (nothing is written).
        StorageError: the disk is full (nothing is left behind).
    """
    target = Path(path)
    if not checked:
        refuse_nonfinite(nonfinite_names(weights), target)
    stored, found = _unique(weights, aliases)
    extra = _metadata(found, metadata)
    target.parent.mkdir(parents=True, exist_ok=True)
    body: bytes | Callable[[HashingWriter], None] = functools.partial(
        _stream, stored=stored, metadata=extra
    )
    if sys.byteorder != "little":  # safetensors stores little-endian; let it convert
        body = weights_bytes(weights, aliases, metadata)[0]
    try:
        digest = write_hashed(target, body, atomic=atomic)
    except OSError as exc:
        raise (disk_full_error(exc, target) or exc) from exc
    return found, digest


def write_weights(
    path: str | Path,
    weights: Mapping[str, torch.Tensor],
    *,
    aliases: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Write fp32 weights to one safetensors file, atomically; return the aliases recorded.

    The one path by which ampkit writes weights: a full checkpoint's ``model.safetensors``
    (:func:`ampkit.checkpoint.folder.write_checkpoint`), the Trainer's final weights and
    ``ampkit checkpoint export`` all go through it. The tensors are streamed to the file from
    their memory (no in-memory copy of the file).

    Raises:
        NonFiniteWeightsError: a weight holds inf/NaN (nothing is written).
        StorageError: the disk is full (nothing is left behind).
    """
    return write_weights_hashed(path, weights, aliases=aliases, metadata=metadata)[0]


@contextmanager
def native_path(file: Path) -> Iterator[str]:
    """A name of ``file`` that native readers (torch's memory map, safetensors) can open: the
    path itself when it is valid UTF-8, else ``/proc/self/fd/N`` of the file opened here for
    the block (a run folder named with any bytes, ``--out $'r\\xff'``).

    Raises:
        OSError: the path is not UTF-8 and this system has no ``/proc/self/fd``, or the file
            cannot be opened.
    """
    name = os.fspath(file)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        yield name
        return
    if not os.path.isdir("/proc/self/fd"):
        raise OSError(
            errno.EILSEQ, "its path is not valid UTF-8, which torch and safetensors cannot open"
        )
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def read_file(
    file: str | Path, aliases: Mapping[str, str] | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, str], dict[str, str]]:
    """Load one safetensors file (no code runs): ``(tensors, aliases, metadata)``, the aliases
    it records (and ``aliases``) tied again, so both names hold the same tensor; ``metadata``
    is the file's other header entries. Callers read weights with
    :func:`ampkit.checkpoint.folder.read_weights`, which verifies checkpoints first.

    Raises:
        CheckpointError: the file is not readable safetensors.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with native_path(Path(file)) as name, safe_open(name, framework="pt") as f:
            header = dict(f.metadata() or {})
            recorded = json.loads(header.pop(ALIASES_KEY, "{}"))
            recorded = recorded if isinstance(recorded, dict) else {}
            weights = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint: {file} is not a readable safetensors file ({exc}). "
            "Use another checkpoint."
        ) from None
    tied = {
        name: target
        for name, target in {**recorded, **(aliases or {})}.items()
        if isinstance(name, str) and isinstance(target, str) and target in weights
    }
    for name, target in tied.items():
        weights[name] = weights[target]
    return weights, tied, header

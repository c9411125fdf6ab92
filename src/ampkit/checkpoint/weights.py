"""fp32 safetensors weights as ampkit writes them: tied tensors once, never inf/NaN.

safetensors refuses tensors that share memory ("Some tensors share memory"), which every model
with tied weights has (GPT-2, BERT and T5 tie ``lm_head.weight`` to the token embedding). The
weights are stored with each tie once; the dropped names go into the file's metadata under
``ampkit.aliases`` (``{"lm_head.weight": "transformer.wte.weight"}``) and are tied again on
load, so a restored model shares the memory as before. ``safetensors.torch.load_model`` also
restores such a file into a tied model.

Weights holding inf or NaN are refused with :class:`~ampkit.errors.NonFiniteWeightsError`
before anything is written, so a finite checkpoint is never followed by a non-finite one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

from ampkit._files import atomic_write, is_disk_full
from ampkit.errors import CheckpointError, NonFiniteWeightsError, StorageError

__all__ = [
    "ALIASES_KEY",
    "disk_full_error",
    "find_aliases",
    "nonfinite_names",
    "read_file",
    "refuse_nonfinite",
    "weights_bytes",
    "write_weights",
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
    One device synchronisation per device."""
    by_device: dict[torch.device, list[str]] = {}
    for name, tensor in tensors.items():
        local = _local(tensor)
        if local.is_floating_point() and local.numel():
            by_device.setdefault(local.device, []).append(name)
    bad: set[str] = set()
    for names in by_device.values():
        flags = torch.stack([torch.isfinite(_local(tensors[k])).all() for k in names]).tolist()
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


def _unique_fp32(
    weights: Mapping[str, torch.Tensor], aliases: Mapping[str, str] | None
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    found = {**find_aliases(weights), **(aliases or {})}
    found = {name: to for name, to in found.items() if name in weights and to in weights}
    stored: dict[str, torch.Tensor] = {}
    storages: set[tuple[torch.device, int]] = set()
    for name, tensor in weights.items():
        if name in found:
            continue
        fp32 = tensor.detach().to("cpu", torch.float32).contiguous()
        key = (fp32.device, fp32.untyped_storage().data_ptr())
        if fp32.numel() and key in storages:  # overlapping views that are not one tensor
            fp32 = fp32.clone()
        storages.add((fp32.device, fp32.untyped_storage().data_ptr()))
        stored[name] = fp32
    return stored, found


def weights_bytes(
    weights: Mapping[str, torch.Tensor],
    aliases: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> tuple[bytes, dict[str, str]]:
    """``(safetensors bytes in fp32, aliases)``: each tie stored once, the aliases (found by
    memory, plus those given) recorded in the metadata."""
    from safetensors.torch import save

    stored, found = _unique_fp32(weights, aliases)
    extra = dict(metadata or {})
    if found:
        extra[ALIASES_KEY] = json.dumps(found, sort_keys=True)
    return save(stored, metadata=extra or None), found


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
    ``ampkit checkpoint export`` all go through it.

    Raises:
        NonFiniteWeightsError: a weight holds inf/NaN (nothing is written).
        StorageError: the disk is full (nothing is left behind).
    """
    target = Path(path)
    refuse_nonfinite(nonfinite_names(weights), target)
    data, found = weights_bytes(weights, aliases, metadata)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write(target, data)
    except OSError as exc:
        raise (disk_full_error(exc, target) or exc) from exc
    return found


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
        with safe_open(str(file), framework="pt") as f:
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

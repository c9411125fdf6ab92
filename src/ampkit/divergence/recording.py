"""What one side of a comparison saw: per module call, its output (and its first input) and the
gradient of its own parameters, each as a hash of the exact bytes, range statistics of the
whole tensor, and a bounded sample of its values for the error statistics.

Memory is bounded: a tensor of any size keeps at most ``max_values`` values (every k-th
element of the flattened tensor, the same positions on both sides), so a record of a model with
M module calls holds at most ``3 * M * max_values`` fp32 numbers. A record is written to a
folder (``record.json`` with the entries, ``values.safetensors`` with the samples) and read back
in another process or on another machine (:func:`load_record`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ampkit._files import atomic_write, json_safe
from ampkit._tree import iter_tensors
from ampkit.errors import ConfigurationError, DataError

__all__ = ["Entry", "Record", "Recorder", "load_record", "tensor_entry"]

_FORMAT = "ampkit-compare-record/1"


@dataclass(frozen=True)
class Entry:
    """One recorded tensor.

    Attributes:
        key: ``<module>#<call>:<what>``: ``what`` is ``out<i>`` (the i-th floating output),
            ``in`` (the first floating input) or ``grad`` (the module's own parameter
            gradients, flattened together and divided by the loss scale).
        module: the module's name (``""`` for the model itself).
        kind: ``"forward"``, ``"input"`` or ``"grad"``.
        order: position in the side's execution order (forward calls, then gradients).
        shape, dtype: of the tensor as the module produced it.
        digest: BLAKE2b-64 of its bytes (equal digests: bitwise equal tensors).
        numel, nonfinite, absmax, mean: over the whole tensor (absmax and mean over its finite
            values; NaN when none).
    """

    key: str
    module: str
    kind: str
    order: int
    shape: tuple[int, ...]
    dtype: str
    digest: str
    numel: int
    nonfinite: int
    absmax: float
    mean: float


def _digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()
    return hashlib.blake2b(data.tobytes(), digest_size=8).hexdigest()


def _sample(flat: torch.Tensor, max_values: int) -> np.ndarray:
    stride = max(1, math.ceil(flat.numel() / max_values))
    return flat[::stride][:max_values].float().cpu().numpy().copy()


def tensor_entry(
    tensor: torch.Tensor, *, key: str, module: str, kind: str, order: int, max_values: int
) -> tuple[Entry, np.ndarray]:
    """The :class:`Entry` of ``tensor`` and its sample (fp32, at most ``max_values``)."""
    t = tensor.detach()
    flat = t.reshape(-1)
    finite = torch.isfinite(flat)
    n_finite = int(finite.sum())
    values = flat.float()[finite] if n_finite < flat.numel() else flat.float()
    entry = Entry(
        key=key,
        module=module,
        kind=kind,
        order=order,
        shape=tuple(t.shape),
        dtype=str(t.dtype).removeprefix("torch."),
        digest=_digest(t),
        numel=flat.numel(),
        nonfinite=flat.numel() - n_finite,
        absmax=float(values.abs().max()) if n_finite else math.nan,
        mean=float(values.mean()) if n_finite else math.nan,
    )
    return entry, _sample(flat, max_values)


@dataclass
class Record:
    """Everything one side recorded, and how it ran.

    Attributes:
        setting: the side's spelling (``bf16+compile``).
        meta: model, precision decision, device, torch version, loss, loss scale.
        entries: in execution order.
        samples: ``key -> fp32 values`` (bounded, see the module docstring).
    """

    setting: str
    meta: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)
    samples: dict[str, np.ndarray] = field(default_factory=dict)

    def save(self, folder: str | Path) -> Path:
        """Write ``record.json`` and ``values.safetensors`` into ``folder`` (created)."""
        from safetensors.numpy import save

        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        atomic_write(target / "values.safetensors", save(self.samples))
        document = {
            "format": _FORMAT,
            "setting": self.setting,
            "meta": self.meta,
            "entries": [asdict(e) for e in self.entries],
        }
        text = json.dumps(json_safe(document), indent=1, allow_nan=False) + "\n"
        atomic_write(target / "record.json", text)
        return target


def load_record(folder: str | Path) -> Record:
    """Read a record written by :meth:`Record.save` (``ampkit compare --record DIR``).

    Raises:
        ConfigurationError: the folder holds no record.
        DataError: the record is damaged or of another format.
    """
    from safetensors.numpy import load_file

    path = Path(folder)
    if not (path / "record.json").is_file() or not (path / "values.safetensors").is_file():
        raise ConfigurationError(
            f"record: {path} holds no comparison record (record.json and values.safetensors). "
            "Write one with `ampkit compare --model M --a SETTING --record DIR`."
        )
    try:
        document = json.loads((path / "record.json").read_text(encoding="utf-8"))
        samples = load_file(str(path / "values.safetensors"))
    except (ValueError, OSError) as exc:
        raise DataError(f"record: {path} is damaged ({exc}). Record it again.") from None
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise DataError(
            f"record: {path}/record.json is not a {_FORMAT} record. Record it again with this "
            "version of ampkit."
        )
    entries = []
    for raw in document["entries"]:
        raw = dict(raw)
        raw["shape"] = tuple(raw["shape"])
        raw["absmax"] = math.nan if raw["absmax"] is None else raw["absmax"]
        raw["mean"] = math.nan if raw["mean"] is None else raw["mean"]
        entries.append(Entry(**raw))
    return Record(
        setting=document["setting"], meta=document["meta"], entries=entries, samples=samples
    )


class Recorder:
    """Fills a :class:`Record` from forward hooks on every module (:meth:`hooked`): each
    module call's floating outputs and first floating input, in call order; then, after
    backward, each module's parameter gradients (:meth:`add_grads`)."""

    def __init__(self, record: Record, max_values: int) -> None:
        self.record = record
        self.max_values = max_values
        self._calls: dict[str, int] = {}

    @contextlib.contextmanager
    def hooked(self, model: torch.nn.Module) -> Iterator[None]:
        """A forward hook on every module of ``model`` for a ``with`` block (removed after,
        error or not). Under ``torch.compile`` each hook is a graph break and runs eagerly:
        dynamo must not trace the recording itself (hashes, host copies), nor compile the
        hook's frame (the doctor's hooks would be recompiled per output dtype)."""
        handles = []
        try:
            for name, module in model.named_modules():
                hook = torch.compiler.disable(functools.partial(self._after_forward, name))
                handles.append(module.register_forward_hook(hook, with_kwargs=True))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def add(self, tensor: torch.Tensor, *, key: str, module: str, kind: str) -> None:
        entry, sample = tensor_entry(
            tensor,
            key=key,
            module=module,
            kind=kind,
            order=len(self.record.entries),
            max_values=self.max_values,
        )
        self.record.entries.append(entry)
        self.record.samples[key] = sample

    def _after_forward(self, name: str, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        first = next((t for t in iter_tensors((args, kwargs)) if t.is_floating_point()), None)
        if first is not None:
            self.add(first, key=f"{name}#{call}:in", module=name, kind="input")
        outputs = [t for t in iter_tensors(output) if t.is_floating_point()]
        for index, tensor in enumerate(outputs):
            self.add(tensor, key=f"{name}#{call}:out{index}", module=name, kind="forward")

    def add_grads(self, model: torch.nn.Module, scale: float) -> None:
        """Each module's own parameter gradients (flattened together, in fp32, divided by the
        loss scale), in the order of ``model.named_modules()``."""
        for name, module in model.named_modules():
            grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
            if not grads:
                continue
            flat = torch.cat([g.detach().float().reshape(-1) for g in grads]) / scale
            self.add(flat, key=f"{name}:grad", module=name, kind="grad")

"""Where two records part: per tensor the error of side B against side A, the first module
whose output leaves the expected error of the narrower format, and the modules that add the
most error.

The error of a tensor is ``||b - a|| / ||a||`` over the recorded samples (the same positions on
both sides); a value that is finite in A and inf/NaN in B is an infinite error. The tolerance is
``factor * eps`` of the narrower of the two sides' compute formats (``eps``: the distance from
1.0 to the next value, from ``torch.finfo``): fp32 1.2e-7, bf16 7.8e-3, fp16 9.8e-4. A module
*adds* error when its output's error exceeds the error of its input; the leaf modules with the
largest additions are the contributors.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ampkit.divergence.recording import Entry, Record

__all__ = ["DEFAULT_FACTOR", "Diff", "EntryDiff", "diff_records", "format_eps"]

#: Tolerance in units of the narrower format's eps (one forward and backward of a model
#: measured at most 1x eps for bf16 and fp16 autocast and 3.4x for inductor in fp32).
DEFAULT_FACTOR = 8.0

#: eps of each compute dtype (torch.finfo(dtype).eps), without importing torch here.
_EPS = {
    "float32": 2.0**-23,
    "bfloat16": 2.0**-7,
    "float16": 2.0**-10,
    "float8_e4m3fn": 2.0**-3,
    "float8_e5m2": 2.0**-2,
}


def format_eps(dtype: str) -> float:
    """eps of a compute dtype's name (``"bfloat16"``); fp32's for names not listed."""
    return _EPS.get(dtype, _EPS["float32"])


@dataclass(frozen=True)
class EntryDiff:
    """One tensor of both sides.

    Attributes:
        key, module, kind: as the :class:`~ampkit.divergence.recording.Entry`.
        error: relative L2 error of B against A (inf when B is non-finite where A is not).
        max_abs: the largest absolute difference over the samples.
        input_error: the error of the module's first input (forward entries; None otherwise).
        bitwise: the two tensors are bitwise equal (same digest).
        diverged: ``error`` exceeds the tolerance.
        a, b: absmax and non-finite count of each side, over the whole tensor.
    """

    key: str
    module: str
    kind: str
    error: float
    max_abs: float
    input_error: float | None
    bitwise: bool
    diverged: bool
    a_absmax: float
    b_absmax: float
    a_nonfinite: int
    b_nonfinite: int

    @property
    def added(self) -> float:
        """Error this module added: its output's error minus its input's."""
        base = self.input_error or 0.0
        if math.isinf(self.error):
            return math.inf if not math.isinf(base) else 0.0
        return self.error - base


@dataclass(frozen=True)
class Diff:
    """The comparison of two records.

    Attributes:
        a, b: the sides' settings as spelled; meta_a, meta_b: how each ran.
        tolerance: the relative error beyond which a tensor has parted.
        entries: every tensor both sides recorded, in A's execution order.
        first: the first forward output beyond the tolerance (None: none parted).
        first_grad: the first module whose parameter gradients part, in backward order.
        contributors: the forward entries that added the most error, largest first (5).
        only_a, only_b: keys recorded by one side only (a different model or code path).
        reference_nonfinite: A (the reference) holds inf/NaN: nothing can be called "ok".
    """

    a: str
    b: str
    meta_a: dict[str, object]
    meta_b: dict[str, object]
    tolerance: float
    entries: tuple[EntryDiff, ...]
    first: EntryDiff | None
    first_grad: EntryDiff | None
    contributors: tuple[EntryDiff, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    reference_nonfinite: bool

    @property
    def parted(self) -> bool:
        return self.first is not None or self.first_grad is not None

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        for name in ("first", "first_grad"):
            value = getattr(self, name)
            data[name] = value.key if value is not None else None
        data["contributors"] = [c.key for c in self.contributors]
        return data


def _error(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    fx, fy = np.isfinite(x), np.isfinite(y)
    if np.any(fx & ~fy):
        return math.inf, math.inf
    both = fx & fy
    if not np.any(both):
        return 0.0, 0.0
    d = y[both].astype(np.float64) - x[both].astype(np.float64)
    norm = float(np.linalg.norm(x[both].astype(np.float64)))
    diff = float(np.linalg.norm(d))
    error = diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)
    return error, float(np.max(np.abs(d))) if d.size else 0.0


def _tolerance(a: Record, b: Record, factor: float) -> float:
    eps = max(format_eps(str(r.meta.get("compute_dtype", "float32"))) for r in (a, b))
    return factor * eps


def diff_records(a: Record, b: Record, *, factor: float = DEFAULT_FACTOR) -> Diff:
    """Compare ``b`` against ``a`` (the reference); see the module docstring."""
    tolerance = _tolerance(a, b, factor)
    b_entries = {e.key: e for e in b.entries}
    a_keys = {e.key for e in a.entries}
    errors: dict[str, float] = {}
    rows: list[EntryDiff] = []
    for ea in a.entries:
        eb = b_entries.get(ea.key)
        if eb is None:
            continue
        error, max_abs = _error(a.samples[ea.key], b.samples[eb.key])
        if ea.digest == eb.digest:
            error, max_abs = 0.0, 0.0
        errors[ea.key] = error
        if ea.kind == "input":
            continue
        input_key = ea.key.rsplit(":", 1)[0] + ":in"
        rows.append(_row(ea, eb, error, max_abs, errors.get(input_key), tolerance))
    forward = [r for r in rows if r.kind == "forward"]
    first = next((r for r in forward if r.diverged), None)
    order = {r.module: i for i, r in reversed(list(enumerate(forward)))}  # first call of each
    grads = sorted(
        (r for r in rows if r.kind == "grad"),
        key=lambda r: order.get(r.module, -1),
        reverse=True,  # backward reaches the last module first
    )
    first_grad = next((r for r in grads if r.diverged), None)
    modules = {r.module for r in forward}
    parents = {m for m in modules for other in modules if other != m and _inside(other, m)}
    contributors = sorted(  # leaves only: a parent's error is its children's
        (r for r in forward if r.module not in parents and r.added > tolerance / 2),
        key=lambda r: r.added,
        reverse=True,
    )[:5]
    return Diff(
        a=a.setting,
        b=b.setting,
        meta_a=dict(a.meta),
        meta_b=dict(b.meta),
        tolerance=tolerance,
        entries=tuple(rows),
        first=first,
        first_grad=first_grad,
        contributors=tuple(contributors),
        only_a=tuple(e.key for e in a.entries if e.key not in b_entries),
        only_b=tuple(k for k in b_entries if k not in a_keys),
        reference_nonfinite=any(e.nonfinite for e in a.entries),
    )


def _inside(child: str, parent: str) -> bool:
    return parent == "" or child.startswith(parent + ".")


def _row(
    ea: Entry, eb: Entry, error: float, max_abs: float, input_error: float | None, tol: float
) -> EntryDiff:
    return EntryDiff(
        key=ea.key,
        module=ea.module,
        kind=ea.kind,
        error=error,
        max_abs=max_abs,
        input_error=input_error,
        bitwise=ea.digest == eb.digest,
        diverged=error > tol or (eb.nonfinite > 0 and ea.nonfinite == 0),
        a_absmax=ea.absmax,
        b_absmax=eb.absmax,
        a_nonfinite=ea.nonfinite,
        b_nonfinite=eb.nonfinite,
    )

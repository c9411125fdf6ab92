"""The parity check: does the exported model compute what the fp32 PyTorch model computes?

For every output the exported model's values ``y`` are compared with the fp32 reference ``r``
over all parity batches (the example inputs plus a few more):

* ``max_abs`` = ``max |y - r|``;
* ``max_rel`` = ``max |y - r| / max |r|``: the error relative to the output's scale. An
  elementwise ``|y - r| / |r|`` is meaningless where ``r`` crosses zero; relative to the
  largest value it is what decides whether a logit or an embedding moved;
* ``top1``: the fraction of positions whose argmax over the last dimension agrees (for
  classifier and language-model logits: outputs named ``*logits*``, or a model's only output);
* ``nonfinite``: inf/NaN values in ``y`` where ``r`` is finite;
* ``reference_nonfinite``: inf/NaN values in the reference ``r`` itself.

An output passes when its reference is finite, it has no new non-finite values,
``max_rel <= tolerance.rel`` and, where top-1 applies, ``top1 >= tolerance.top1``. A
non-finite reference always fails: positions where ``r`` is inf/NaN cannot be compared, and a
reference that is NaN everywhere would otherwise leave nothing to disagree with (max abs 0). :data:`TOLERANCES` holds the defaults:
about twenty times the unit roundoff of the format (fp16 ``2**-11``, bf16 ``2**-8``), which
leaves room for the error a few layers accumulate and flags the real failures (overflow,
a clipped constant, a dtype mix-up) that are orders of magnitude larger.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ampkit._text_table import text_table

__all__ = ["TOLERANCES", "OutputParity", "ParityReport", "Tolerance", "compare"]


@dataclass(frozen=True)
class Tolerance:
    """When an output passes. ``rel``: the largest ``max_rel``; ``top1``: the smallest top-1
    agreement."""

    rel: float
    top1: float = 0.99


#: Default tolerances by the precision of the exported model.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(rel=1e-4),
    "fp16": Tolerance(rel=1e-2),
    "bf16": Tolerance(rel=5e-2),
}


@dataclass(frozen=True)
class OutputParity:
    """One output's agreement with the fp32 reference over all parity batches."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs: float
    max_rel: float
    top1: float | None
    nonfinite: int
    passed: bool
    reference_nonfinite: int = 0


@dataclass(frozen=True)
class ParityReport:
    """The verdict table.

    Attributes:
        runtime: what ran the exported model (``onnxruntime 1.x (CPU)``, ...).
        batches: parity batches compared (the example inputs are the first).
        tolerance: the tolerance applied.
        outputs: one row per output.
        notes: facts the reader needs (e.g. which runtime had to stand in, and why).
    """

    runtime: str
    batches: int
    tolerance: Tolerance
    outputs: tuple[OutputParity, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Every output passed."""
        return all(o.passed for o in self.outputs)

    def to_text(self) -> str:
        """The verdict table, one row per output."""
        header = ("output", "shape", "dtype", "max abs", "max rel", "top-1", "non-finite", "")
        rows = [header]
        for o in self.outputs:
            top1 = f"{o.top1:.2%}" if o.top1 is not None else "-"
            rows.append(
                (
                    o.name,
                    "x".join(map(str, o.shape)),
                    o.dtype,
                    f"{o.max_abs:.3g}",
                    f"{o.max_rel:.3g}",
                    top1,
                    str(o.nonfinite)
                    + (f" (fp32 {o.reference_nonfinite})" if o.reference_nonfinite else ""),
                    "ok" if o.passed else "FAIL",
                )
            )
        lines = text_table(rows, rule=False)
        verdict = "PASS" if self.passed else "FAIL"
        lines.append(
            f"{verdict}: {self.batches} batches on {self.runtime}; tolerance max rel <= "
            f"{self.tolerance.rel:g}, top-1 >= {self.tolerance.top1:.0%}, no new inf/NaN"
        )
        lines.extend(f"note: {n}" for n in self.notes)
        unreferenced = [o.name for o in self.outputs if o.reference_nonfinite]
        if unreferenced:
            lines.append(
                f"note: the fp32 reference itself holds inf/NaN in {', '.join(unreferenced)} "
                "(the count in brackets): nothing can be checked against it"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values (``passed`` included)."""
        return {**asdict(self), "passed": self.passed}

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=2)


def _uses_top1(name: str, count: int, shape: tuple[int, ...]) -> bool:
    return len(shape) >= 2 and shape[-1] >= 2 and ("logits" in name.lower() or count == 1)


def compare(
    names: Sequence[str],
    reference: Sequence[Sequence[np.ndarray]],
    actual: Sequence[Sequence[np.ndarray]],
    tolerance: Tolerance,
    runtime: str,
    notes: Sequence[str] = (),
) -> ParityReport:
    """Compare ``actual[batch][output]`` with ``reference[batch][output]`` (see the module
    docstring for the definitions)."""
    rows = []
    for index, name in enumerate(names):
        refs = [np.asarray(b[index]) for b in reference]
        outs = [np.asarray(b[index]) for b in actual]
        if not np.issubdtype(refs[0].dtype, np.floating):
            same = all(np.array_equal(r, o) for r, o in zip(refs, outs, strict=True))
            rows.append(
                OutputParity(name, refs[0].shape, str(outs[0].dtype), 0.0 if same else float("inf"),
                             0.0 if same else float("inf"), None, 0, same)
            )  # fmt: skip
            continue
        max_abs, scale, nonfinite, agree, total = 0.0, 0.0, 0, 0, 0
        reference_nonfinite = 0
        top1 = _uses_top1(name, len(names), refs[0].shape)
        for r, o in zip(refs, outs, strict=True):
            r64, o64 = r.astype(np.float64), o.astype(np.float64)
            finite = np.isfinite(r64)
            reference_nonfinite += int(finite.size - finite.sum())
            bad = finite & ~np.isfinite(o64)
            nonfinite += int(bad.sum())
            ok = finite & ~bad
            if ok.any():
                max_abs = max(max_abs, float(np.abs(o64[ok] - r64[ok]).max()))
                scale = max(scale, float(np.abs(r64[ok]).max()))
            if top1:
                agree += int((r64.argmax(-1) == o64.argmax(-1)).sum())
                total += int(np.prod(r.shape[:-1]))
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        agreement = agree / total if top1 and total else None
        passed = (
            reference_nonfinite == 0
            and nonfinite == 0
            and max_rel <= tolerance.rel
            and (agreement is None or agreement >= tolerance.top1)
        )
        rows.append(
            OutputParity(
                name=name,
                shape=tuple(refs[0].shape),
                dtype=str(outs[0].dtype),
                max_abs=max_abs,
                max_rel=max_rel,
                top1=agreement,
                nonfinite=nonfinite,
                passed=passed,
                reference_nonfinite=reference_nonfinite,
            )
        )
    return ParityReport(
        runtime=runtime,
        batches=len(reference),
        tolerance=tolerance,
        outputs=tuple(rows),
        notes=tuple(notes),
    )

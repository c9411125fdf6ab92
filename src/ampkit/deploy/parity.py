"""The parity check: does the exported model compute what the fp32 PyTorch model computes?

For every output the exported model's values ``y`` are compared with the fp32 reference ``r``
over all parity batches (the example inputs plus a few more):

* ``max_abs`` = ``max |y - r|``;
* ``max_rel`` = ``max |y - r| / max |r|``: the error relative to the output's scale. An
  elementwise ``|y - r| / |r|`` is meaningless where ``r`` crosses zero; relative to the
  largest value it is what decides whether a logit or an embedding moved;
* ``top1``: the fraction of positions whose argmax over the last dimension agrees (for
  classifier and language-model logits: outputs named ``*logits*``, or a model's only output);
* ``decisive_top1``: the same fraction over the *decisive* positions only, those whose fp32
  margin between the two best classes exceeds :data:`DECISIVE_MULTIPLE` (4) times the
  output's typical error: the median over all compared rows of the row's largest error
  ``max_j |y_j - r_j|``. Swapping the two best classes takes an error of at least half their
  margin in that row; a random-weight model's logits are nearly tied everywhere, so rounding
  alone swaps many of them and plain top-1 fails it at errors far inside the tolerance. A
  decisive position can only swap through an error over twice the typical one: a row the
  export computes wrongly, not rounding. (The row's own error would not do: a row computed
  wrongly has a large error, which would make its own margin look small.);
* ``nonfinite``: inf/NaN values in ``y`` where ``r`` is finite;
* ``reference_nonfinite``: inf/NaN values in the reference ``r`` itself.

Positions a padding mask marks (``compared`` false: an ``attention_mask`` of 0) are left out
of ``max_abs``, ``max_rel`` and top-1: the outputs at a pad token are not defined by the model
(a fully masked row of a left-padded causal batch attends to nothing; PyTorch and the ONNX
graph fill it differently even in fp32). They are still counted for ``nonfinite``: an inf/NaN
there reaches the real positions through the next layer's attention (0 * NaN is NaN).

An output passes when its reference is finite, it has no new non-finite values,
``max_rel <= tolerance.rel`` and, where top-1 applies, ``decisive_top1 >= tolerance.top1``;
:attr:`OutputParity.failures` says which criterion failed, with the figures. A non-finite
reference always fails: positions where ``r`` is inf/NaN cannot be compared, and a reference
that is NaN everywhere would otherwise leave nothing to disagree with (max abs 0).
:data:`TOLERANCES` holds the defaults: about twenty times the unit roundoff of the format
(fp16 ``2**-11``, bf16 ``2**-8``), which leaves room for the error a few layers accumulate and
flags the real failures (overflow, a clipped constant, a dtype mix-up) that are orders of
magnitude larger.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ampkit._text_table import text_table

__all__ = [
    "DECISIVE_MULTIPLE",
    "TOLERANCES",
    "OutputParity",
    "ParityReport",
    "Tolerance",
    "compare",
]


@dataclass(frozen=True)
class Tolerance:
    """When an output passes. ``rel``: the largest ``max_rel``; ``top1``: the smallest top-1
    agreement over the decisive positions (see the module docstring)."""

    rel: float
    top1: float = 0.99


#: A position is decisive when its fp32 margin between the two best classes exceeds this many
#: times the output's typical error (the median over rows of each row's largest error).
DECISIVE_MULTIPLE = 4.0

#: Default tolerances by the precision of the exported model.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(rel=1e-4),
    "fp16": Tolerance(rel=1e-2),
    "bf16": Tolerance(rel=5e-2),
}


@dataclass(frozen=True)
class OutputParity:
    """One output's agreement with the fp32 reference over all parity batches.

    Attributes:
        name, shape, dtype: the output (shape of the first batch; dtype the exported one).
        max_abs, max_rel: the largest error, absolute and relative to the output's scale.
        top1: argmax agreement over all compared positions (None where top-1 does not apply).
        nonfinite: inf/NaN where the reference is finite (padded positions included).
        passed: every criterion held.
        reference_nonfinite: inf/NaN in the fp32 reference.
        decisive_top1: argmax agreement over the decisive positions (fp32 margin above the
            row's error); 1.0 where no position is decisive, None where top-1 does not apply.
        decisive: how many positions were decisive.
        compared, positions: the positions compared (not padding) and all positions, over
            all batches (the product of every dimension but the last).
        failures: one line per failed criterion, with the figures.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    max_abs: float
    max_rel: float
    top1: float | None
    nonfinite: int
    passed: bool
    reference_nonfinite: int = 0
    decisive_top1: float | None = None
    decisive: int = 0
    compared: int = 0
    positions: int = 0
    failures: tuple[str, ...] = ()


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
        header = ("output", "shape", "dtype", "max abs", "max rel", "top-1", "decisive top-1",
                  "non-finite", "")  # fmt: skip
        rows = [header]
        for o in self.outputs:
            top1 = f"{o.top1:.2%}" if o.top1 is not None else "-"
            decisive = (
                f"{o.decisive_top1:.2%} of {o.decisive:,}" if o.decisive_top1 is not None else "-"
            )
            rows.append(
                (
                    o.name,
                    "x".join(map(str, o.shape)),
                    o.dtype,
                    f"{o.max_abs:.3g}",
                    f"{o.max_rel:.3g}",
                    top1,
                    decisive,
                    str(o.nonfinite)
                    + (f" (fp32 {o.reference_nonfinite})" if o.reference_nonfinite else ""),
                    "ok" if o.passed else "FAIL",
                )
            )
        lines = text_table(rows, rule=False)
        verdict = "PASS" if self.passed else "FAIL"
        lines.append(
            f"{verdict}: {self.batches} batches on {self.runtime}; tolerance max rel <= "
            f"{self.tolerance.rel:g}, decisive top-1 >= {self.tolerance.top1:.0%}, no new inf/NaN"
        )
        lines.extend(f"failed: {o.name}: {f}" for o in self.outputs for f in o.failures)
        padded = [o for o in self.outputs if o.compared < o.positions]
        if padded:
            o = padded[0]
            lines.append(
                f"note: {o.positions - o.compared:,} of {o.positions:,} positions are padding "
                f"(attention mask 0) in {', '.join(p.name for p in padded)}: not compared, "
                "only checked for inf/NaN"
            )
        if any(o.decisive_top1 is not None for o in self.outputs):
            lines.append(
                "note: decisive top-1 counts the positions whose fp32 margin between the two best "
                f"classes exceeds {DECISIVE_MULTIPLE:g}x the typical row error; the others are "
                "near-ties that rounding may swap"
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


def _top2_margin(r: np.ndarray) -> np.ndarray:
    """Best minus second-best value over the last dimension."""
    top2 = np.partition(r, -2, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def _failures(
    row_nonfinite: int,
    reference_nonfinite: int,
    max_rel: float,
    decisive_top1: float | None,
    decisive: int,
    tolerance: Tolerance,
) -> tuple[str, ...]:
    failures = []
    if reference_nonfinite:
        failures.append(f"the fp32 reference holds {reference_nonfinite:,} inf/NaN")
    if row_nonfinite:
        failures.append(f"{row_nonfinite:,} new inf/NaN")
    if max_rel > tolerance.rel:
        failures.append(f"max rel {max_rel:.3g} > {tolerance.rel:g}")
    if decisive_top1 is not None and decisive_top1 < tolerance.top1:
        wrong = round((1 - decisive_top1) * decisive)
        failures.append(
            f"decisive top-1 {decisive_top1:.2%} < {tolerance.top1:.0%} ({wrong:,} of "
            f"{decisive:,} positions whose fp32 margin exceeds {DECISIVE_MULTIPLE:g}x the typical "
            "error disagree)"
        )
    return tuple(failures)


def compare(
    names: Sequence[str],
    reference: Sequence[Sequence[np.ndarray]],
    actual: Sequence[Sequence[np.ndarray]],
    tolerance: Tolerance,
    runtime: str,
    notes: Sequence[str] = (),
    compared: Sequence[Sequence[np.ndarray | None]] | None = None,
) -> ParityReport:
    """Compare ``actual[batch][output]`` with ``reference[batch][output]`` (see the module
    docstring for the definitions).

    Args:
        compared: per batch and output, a boolean array over the output's leading dimensions
            (``(batch, sequence)`` for a ``(batch, sequence, vocab)`` output) that is False at
            padded positions, or None to compare every position.
    """
    rows = []
    for index, name in enumerate(names):
        refs = [np.asarray(b[index]) for b in reference]
        outs = [np.asarray(b[index]) for b in actual]
        masks = [None if compared is None else compared[i][index] for i in range(len(refs))]
        if not np.issubdtype(refs[0].dtype, np.floating):
            same = all(np.array_equal(r, o) for r, o in zip(refs, outs, strict=True))
            rows.append(
                OutputParity(name, refs[0].shape, str(outs[0].dtype), 0.0 if same else float("inf"),
                             0.0 if same else float("inf"), None, 0, same,
                             failures=() if same else ("integer values differ",))
            )  # fmt: skip
            continue
        max_abs, scale, nonfinite, agree, total = 0.0, 0.0, 0, 0, 0
        reference_nonfinite, decisive, decisive_agree, kept, positions = 0, 0, 0, 0, 0
        top1 = _uses_top1(name, len(names), refs[0].shape)
        row_stats: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        for r, o, mask in zip(refs, outs, masks, strict=True):
            r64, o64 = r.astype(np.float64), o.astype(np.float64)
            finite = np.isfinite(r64)
            reference_nonfinite += int(finite.size - finite.sum())
            bad = finite & ~np.isfinite(o64)
            nonfinite += int(bad.sum())
            lead = r64.shape[:-1] if r64.ndim else ()
            real = np.ones(lead, dtype=bool)
            if mask is not None:
                real = np.broadcast_to(
                    np.asarray(mask, dtype=bool).reshape(
                        np.shape(mask) + (1,) * (len(lead) - np.ndim(mask))
                    ),
                    lead,
                )
            positions += int(real.size)
            kept += int(real.sum())
            where = real[..., None] if r64.ndim else real
            ok = finite & ~bad & where
            if ok.any():
                max_abs = max(max_abs, float(np.abs(o64[ok] - r64[ok]).max()))
                scale = max(scale, float(np.abs(r64[ok]).max()))
            if top1:
                rows_ok = ok.all(-1) & real
                agrees = r64.argmax(-1) == o64.argmax(-1)
                agree += int((agrees & rows_ok).sum())
                total += int(rows_ok.sum())
                with np.errstate(invalid="ignore"):  # inf - inf where not ok: masked out
                    error = np.where(ok, np.abs(o64 - r64), 0.0).max(-1)
                margin = _top2_margin(np.where(finite, r64, 0.0))
                row_stats.append((rows_ok, agrees, error, margin))
        if row_stats:
            errors = np.concatenate([e[kept_rows].ravel() for kept_rows, _, e, _ in row_stats])
            typical = float(np.median(errors)) if errors.size else 0.0
            for rows_ok, agrees, _, margin in row_stats:
                sure = rows_ok & (margin > DECISIVE_MULTIPLE * typical)
                decisive += int(sure.sum())
                decisive_agree += int((agrees & sure).sum())
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        agreement = agree / total if top1 and total else None
        decisive_top1 = (decisive_agree / decisive if decisive else 1.0) if top1 else None
        failures = _failures(
            nonfinite, reference_nonfinite, max_rel, decisive_top1, decisive, tolerance
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
                passed=not failures,
                reference_nonfinite=reference_nonfinite,
                decisive_top1=decisive_top1,
                decisive=decisive,
                compared=kept,
                positions=positions,
                failures=failures,
            )
        )
    return ParityReport(
        runtime=runtime,
        batches=len(reference),
        tolerance=tolerance,
        outputs=tuple(rows),
        notes=tuple(notes),
    )

"""Is a run's loss within the noise of the reference? The convergence verdict.

Two numbers per run, over the steps every compared run logged (the common range):

* **final**: the mean training loss of the last tenth of those steps (at least 5 rows), or the
  last eval loss when every run logged one;
* **mean**: the mean loss over the whole common range (the area under the curve per step).

The noise comes from the runs themselves:

* **seeds** (both sides have two runs or more): the spread of each number across the runs of a
  side, pooled; the difference of the two side means has the standard error
  ``s * sqrt(1/n_ref + 1/n_run)``.
* **curve** (a side has one run): the step-to-step noise of the curve. The loss minus its
  moving average (window ``k``, a twentieth of the rows, at least 5) is cut into blocks of
  ``k`` rows; the spread of the block means measures how much a mean over the window moves by
  chance, correlated steps included. This sees the noise of the batches, not that of the seed,
  so a difference it cannot decide asks for seeds rather than guessing.

With ``z = (run - reference) / sigma`` of the final loss (lower is better):
``|z| <= 2`` is *within noise*; ``z > 3`` is *worse by X (z sigma)* (``z < -3``: *better*);
between the two, and when fewer than 20 rows are shared, *inconclusive: run N seeds*, with
``N`` the seeds per side that would put a difference this size at 3 sigma (at least 3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ampkit.runs.runs import RunGroup

__all__ = ["METHOD", "Verdict", "compare_groups"]

#: The method in one paragraph, printed on the page and in the JSON.
METHOD = (
    "final = mean training loss over the last 10% of the common steps (eval loss when every "
    "run has one); mean = mean loss over the common steps. Noise: with 2+ seeds per side, the "
    "pooled spread across seeds (standard error s*sqrt(1/n_ref+1/n)); otherwise the curve's own "
    "noise (loss minus its moving average, block means of k rows). |z| <= 2: within noise; "
    "z > 3: worse; otherwise inconclusive (run N seeds per side)."
)

_WITHIN, _DECIDED, _MIN_ROWS = 2.0, 3.0, 20


@dataclass(frozen=True)
class Verdict:
    """One run (or seed set) against the reference.

    Attributes:
        label, reference: what was compared with what.
        verdict: ``"within noise"``, ``"worse by X (Y sigma)"``, ``"better by X (Y sigma)"`` or
            ``"inconclusive: run N seeds"``.
        outcome: ``"within"``, ``"worse"``, ``"better"`` or ``"inconclusive"``.
        metric: ``"train loss"`` or ``"eval loss"`` (what ``final`` measures).
        final, final_ref: the final loss of the run and of the reference (side means).
        mean, mean_ref: the mean loss over the common steps.
        sigma: the standard error of ``final - final_ref``; NaN when it could not be measured.
        z: ``(final - final_ref) / sigma``.
        mean_z: the same for the mean loss.
        noise: ``"seeds"`` or ``"curve"``: where sigma came from.
        steps: the common step range ``(first, last)`` the numbers cover.
        seeds_needed: seeds per side that would decide (inconclusive only).
    """

    label: str
    reference: str
    verdict: str
    outcome: str
    metric: str
    final: float
    final_ref: float
    mean: float
    mean_ref: float
    sigma: float
    z: float
    mean_z: float
    noise: str
    steps: tuple[int, int]
    seeds_needed: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _common(groups: Sequence[RunGroup]) -> tuple[int, int]:
    first = max(min(run.steps) for g in groups for run in g.runs)
    last = min(max(run.steps) for g in groups for run in g.runs)
    return first, last


def _curve(run_steps: list[int], values: list[float], lo: int, hi: int) -> np.ndarray:
    x = np.asarray(run_steps)
    y = np.asarray(values, dtype=np.float64)
    keep = (x >= lo) & (x <= hi) & np.isfinite(y)
    return y[keep]


def _window(n: int) -> int:
    return max(5, n // 20)


def _block_se(y: np.ndarray, k: int) -> float:
    """Standard error of a mean over ``k`` consecutive rows of ``y``: the spread of the block
    means of the detrended curve (loss minus its centred moving average)."""
    if len(y) < 2 * k:
        return math.nan
    kernel = np.ones(k) / k
    padded = np.pad(y, (k // 2, k - 1 - k // 2), mode="edge")
    resid = y - np.convolve(padded, kernel, mode="valid")
    blocks = len(resid) // k
    means = resid[: blocks * k].reshape(blocks, k).mean(axis=1)
    return float(np.std(means, ddof=1)) if blocks >= 2 else math.nan


@dataclass(frozen=True)
class _Side:
    finals: list[float]
    means: list[float]
    se_final: float  # curve noise of the final (one run), NaN with seeds
    se_mean: float


def _side(group: RunGroup, lo: int, hi: int, eval_metric: bool) -> _Side:
    finals, means, se_finals, se_means = [], [], [], []
    for run in group.runs:
        y = _curve(*run.series("loss"), lo, hi)
        k = _window(len(y))
        tail = max(5, len(y) // 10)
        if eval_metric:
            ey = _curve(*run.series("eval_loss"), lo, hi)
            finals.append(float(ey[-1]) if len(ey) else math.nan)
        else:
            finals.append(float(y[-tail:].mean()) if len(y) else math.nan)
        means.append(float(y.mean()) if len(y) else math.nan)
        block = _block_se(y, k)
        # a mean over ``tail`` rows of noise whose k-row means spread by ``block``
        se_finals.append(block * math.sqrt(k / tail) if tail else math.nan)
        se_means.append(block * math.sqrt(k / max(len(y), 1)))
    return _Side(finals, means, _rms(se_finals), _rms(se_means))


def _rms(values: list[float]) -> float:
    return float(np.sqrt(np.mean(np.square(values)))) if values else math.nan


def _seed_se(a: list[float], b: list[float]) -> float:
    """Pooled standard error of ``mean(b) - mean(a)`` across seeds."""
    dof = len(a) + len(b) - 2
    pooled = (np.var(a, ddof=1) * (len(a) - 1) + np.var(b, ddof=1) * (len(b) - 1)) / dof
    return float(math.sqrt(pooled * (1 / len(a) + 1 / len(b))))


def compare_groups(reference: RunGroup, others: Sequence[RunGroup]) -> list[Verdict]:
    """The verdict of each group in ``others`` against ``reference`` (see the module doc)."""
    verdicts = []
    for group in others:
        lo, hi = _common([reference, group])
        eval_metric = all(
            any("eval_loss" in r for r in run.rows) for g in (reference, group) for run in g.runs
        )
        ref, run = _side(reference, lo, hi, eval_metric), _side(group, lo, hi, eval_metric)
        seeds = len(reference.runs) >= 2 and len(group.runs) >= 2
        diff = float(np.mean(run.finals) - np.mean(ref.finals))
        mean_diff = float(np.mean(run.means) - np.mean(ref.means))
        if seeds:
            sigma = _seed_se(ref.finals, run.finals)
            mean_sigma = _seed_se(ref.means, run.means)
        else:
            sigma = math.hypot(ref.se_final, run.se_final)
            mean_sigma = math.hypot(ref.se_mean, run.se_mean)
        z = diff / sigma if sigma > 0 else math.nan  # no spread measured: cannot decide
        mean_z = mean_diff / mean_sigma if mean_sigma > 0 else math.nan
        rows = min(
            len(_curve(*r.series("loss"), lo, hi)) for g in (reference, group) for r in g.runs
        )
        needed = None
        if not math.isfinite(z) or rows < _MIN_ROWS or (_WITHIN < abs(z) <= _DECIDED):
            outcome = "inconclusive"
            n_now = min(len(reference.runs), len(group.runs))
            needed = 3
            if seeds and math.isfinite(z) and z:
                needed = max(3, math.ceil(n_now * (_DECIDED / abs(z)) ** 2))
            text = f"inconclusive: run {needed} seeds"
        elif abs(z) <= _WITHIN:
            outcome, text = "within", "within noise"
        else:
            outcome = "worse" if z > 0 else "better"
            rel = abs(diff) / abs(np.mean(ref.finals)) if np.mean(ref.finals) else math.nan
            text = f"{outcome} by {abs(diff):.4g} ({100 * rel:.2g}%, {abs(z):.1f} sigma)"
        verdicts.append(
            Verdict(
                label=group.label,
                reference=reference.label,
                verdict=text,
                outcome=outcome,
                metric="eval loss" if eval_metric else "train loss",
                final=float(np.mean(run.finals)),
                final_ref=float(np.mean(ref.finals)),
                mean=float(np.mean(run.means)),
                mean_ref=float(np.mean(ref.means)),
                sigma=sigma,
                z=z,
                mean_z=mean_z,
                noise="seeds" if seeds else "curve",
                steps=(lo, hi),
                seeds_needed=needed,
            )
        )
    return verdicts

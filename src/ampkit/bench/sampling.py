"""When to stop timing: a confidence interval of the speed-up, and how many rounds would decide.

A benchmark on a shared machine is noisy; a fixed number of rounds either wastes time on a
clear case or gives no answer on a close one. So the benchmark samples adaptively
(:func:`ampkit.bench.run_bench` with ``budget_s``): after the minimum rounds it adds rounds
until the verdict is decided or the time budget is spent, and then says what more would
decide it.

The verdict rests on the median of the per-round paired speed-ups ``t_twin[k] / t_v[k]``.
Its confidence interval is distribution-free (:func:`median_interval`: order statistics of
the sample, from the binomial distribution of how many values fall below the true median),
so it needs no assumption about the shape of a noisy machine's timings, and it narrows as
rounds are added (about ``1 / sqrt(rounds)``) where the spread of the per-round values (their
quartiles) does not. The verdict is *decided* when the interval lies wholly on one side of
the pay-off threshold: wholly at or above it, low precision pays off; wholly below (the "no
gain" side), it does not.

Everything here is a pure function of numbers, so tests feed it synthetic timings.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from ampkit.errors import ConfigurationError

__all__ = [
    "CONFIDENCE",
    "Sampling",
    "decided",
    "median_interval",
    "min_rounds_for",
    "rounds_to_decide",
]

#: Confidence of the interval the verdict is judged by.
CONFIDENCE = 0.95


def min_rounds_for(confidence: float = CONFIDENCE) -> int:
    """The fewest values whose whole range (min to max) covers the median with ``confidence``:
    ``1 - 2**(1 - n) >= confidence`` (6 at 95%)."""
    n = 2
    while 1 - 2.0 ** (1 - n) < confidence:
        n += 1
    return n


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free confidence interval of the median of ``values``.

    With the values sorted, ``[x_(j), x_(n+1-j)]`` (1-based) covers the true median with
    probability ``1 - 2 * P(B <= j - 1)``, ``B ~ Binomial(n, 1/2)``; ``j`` is the largest
    index for which that is at least ``confidence``. With too few values for that confidence
    (fewer than 6 at 95%), the interval is the whole range, min to max (its coverage
    ``1 - 2**(1 - n)`` is then below ``confidence``).

    Raises:
        ConfigurationError: no values, or ``confidence`` outside (0, 1).
    """
    if not values:
        raise ConfigurationError("median_interval: no values to take a median of.")
    if not 0 < confidence < 1:
        raise ConfigurationError(
            f"median_interval: confidence must lie in (0, 1), got {confidence!r}."
        )
    ordered = sorted(values)
    n = len(ordered)
    # exact integers: P(B <= j) = below / 2**n, summed one term at a time
    allowed = Fraction(1 - confidence) * 2**n / 2  # the most P(B <= j) * 2**n may be, each side
    j, below = 1, 1  # P(B <= 0) * 2**n = C(n, 0)
    # step inwards while the narrower interval still has the coverage asked for
    while j + 1 <= (n + 1) // 2 and below + math.comb(n, j) <= allowed:
        below += math.comb(n, j)
        j += 1
    return ordered[j - 1], ordered[n - j]


def decided(interval: tuple[float, float], threshold: float) -> bool:
    """The interval lies wholly on one side of ``threshold`` (at or above, or below)."""
    low, high = interval
    return low >= threshold or high < threshold


def rounds_to_decide(
    values: Sequence[float], threshold: float, confidence: float = CONFIDENCE
) -> int | None:
    """Estimated rounds in all for the median's interval to leave ``threshold``'s side.

    The interval's half-width on the threshold's side shrinks about as ``1 / sqrt(n)``; the
    estimate is the ``n`` at which it becomes smaller than the distance from the median to
    the threshold, assuming the median stays where it is. Returns ``len(values)`` when the
    interval is decided already (with at least :func:`min_rounds_for` values), and None when
    the median sits on the threshold (no number of rounds is expected to decide it) or there
    are fewer than 2 values.
    """
    n = len(values)
    if n < 2:
        return None
    interval = median_interval(values, confidence)
    if decided(interval, threshold) and n >= min_rounds_for(confidence):
        return n
    median = statistics.median(values)
    gap = abs(median - threshold)
    if gap == 0:
        return None
    # the side of the interval that crosses the threshold
    width = median - interval[0] if median >= threshold else interval[1] - median
    if width <= 0:  # too few values for the confidence; the interval is not decided yet
        return max(n + 1, min_rounds_for(confidence))
    # at least one more round, and enough for the interval to have its confidence
    return max(n + 1, min_rounds_for(confidence), math.ceil(n * (width / gap) ** 2))


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How many rounds were timed and why the benchmark stopped.

    Attributes:
        min_rounds: rounds timed before the first check (``--steps``).
        rounds: rounds timed in all.
        seconds: wall seconds the timed rounds took (probes and rests included).
        budget_s: the time budget (None: a fixed ``min_rounds``, no adaptive sampling).
        stopped: ``"decided"`` (the interval left the threshold), ``"budget"`` (the budget
            ran out first), ``"fixed"`` (no budget: exactly ``min_rounds``), or
            ``"nothing to decide"`` (no low precision measured against fp32).
        more_rounds: estimated further rounds that would decide an undecided verdict
            (None when decided, or when no number of rounds is expected to).
        more_seconds: the same in seconds, at the rate measured.
        confidence: of the interval the verdict is judged by.
    """

    min_rounds: int
    rounds: int
    seconds: float
    budget_s: float | None
    stopped: str
    more_rounds: int | None = None
    more_seconds: float | None = None
    confidence: float = CONFIDENCE

"""Long series drawn in bounded size: min/max envelopes that never drop a spike.

A series of ``n`` points longer than ``points`` is cut into ``points`` buckets of consecutive
steps; each bucket keeps its first step, its mean, and its smallest and largest value. The
plot draws the mean as the line and the band between min and max, so one inf-like spike in
100,000 steps is still drawn at its full height (a stride or a mean alone would hide it).
Non-finite values are kept apart: their steps are returned so the plot can mark them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Envelope", "envelope"]


@dataclass(frozen=True)
class Envelope:
    """A series, downsampled or not.

    Attributes:
        x: the first step of each bucket (each point's step when not downsampled).
        mean, low, high: per bucket the mean, smallest and largest finite value (all three
            equal the values when not downsampled); NaN where a bucket holds no finite value.
        nonfinite: steps whose value was inf or NaN (None in the file).
        downsampled: whether buckets hold more than one point.
    """

    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    nonfinite: np.ndarray
    downsampled: bool


def envelope(steps: ArrayLike, values: ArrayLike, points: int = 2000) -> Envelope:
    """The min/max envelope of ``values`` over at most ``points`` buckets."""
    x = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(y)
    bad = x[~finite]
    if len(y) <= points:
        kept = np.where(finite, y, np.nan)
        return Envelope(x, kept, kept, kept, bad, downsampled=False)
    edges = np.linspace(0, len(y), points + 1).astype(np.int64)
    starts = edges[:-1]
    masked = np.where(finite, y, 0.0)
    # reduceat over bucket starts: sums and counts of the finite values, min and max
    sums = np.add.reduceat(masked, starts)
    n_finite = np.add.reduceat(finite.astype(np.int64), starts)
    low = np.minimum.reduceat(np.where(finite, y, np.inf), starts)
    high = np.maximum.reduceat(np.where(finite, y, -np.inf), starts)
    empty = n_finite == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(empty, np.nan, sums / np.maximum(n_finite, 1))
    low = np.where(empty, np.nan, low)
    high = np.where(empty, np.nan, high)
    return Envelope(x[starts], mean, low, high, bad, downsampled=True)

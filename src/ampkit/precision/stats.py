"""Range statistics of fp32 tensors measured against the low-precision formats.

Every threshold comes from :func:`ampkit.precision.float_formats.number_format` (that is, from ``torch.finfo``):

* **overflow**: a value overflows when its magnitude is at least ``max + ulp(max) / 2`` (round to
  nearest: anything from there up rounds past the largest finite value). fp16's is 65520.
* **underflow**: a non-zero value becomes zero when its magnitude is below half the smallest
  subnormal, and subnormal (fewer significant bits) when below the smallest normal value.

:class:`RangeStats` accumulates one module's tensors of one phase (activations or gradients)
over calls and steps: counts, the largest magnitude, exact overflow counts at scale 1, fp8
underflow counts under per-tensor (amax) scaling, and a histogram of ``floor(log2|x|)``
(computed exactly with ``frexp``). Underflow at a power-of-two loss scale is read off the
histogram, exact up to values within half a unit of the smallest normal or subnormal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ampkit.precision.float_formats import NumberFormat, number_formats

__all__ = [
    "HIST_MIN_EXPONENT",
    "HIST_BINS",
    "Fit",
    "FormatLimits",
    "RangeStats",
    "effective_loss_scale",
    "format_limits",
]

#: Histogram bin ``i`` counts values with ``floor(log2|x|) == HIST_MIN_EXPONENT + i``.
HIST_MIN_EXPONENT = -150
#: fp32's exponents are -149 (smallest subnormal) .. 127.
HIST_BINS = 128 - HIST_MIN_EXPONENT

_LOW_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class FormatLimits:
    """Thresholds of one low-precision format, derived from its :class:`NumberFormat`.

    Attributes:
        name: ``fp16``, ``bf16``, ``fp8_e4m3`` or ``fp8_e5m2``.
        dtype: the torch dtype.
        max: largest finite value.
        overflow_at: magnitudes at or above this round past ``max`` (to inf, or saturate/NaN).
        smallest_normal, smallest_subnormal: as in :class:`NumberFormat` (powers of two).
        per_tensor_scaled: fp8 is measured after per-tensor scaling (``max / amax``).
    """

    name: str
    dtype: torch.dtype
    max: float
    overflow_at: float
    smallest_normal: float
    smallest_subnormal: float
    per_tensor_scaled: bool

    @classmethod
    def of(cls, fmt: NumberFormat) -> FormatLimits:
        """Limits of ``fmt``; raises ValueError if its small limits are not powers of two."""
        for value in (fmt.smallest_normal, fmt.smallest_subnormal):
            if math.frexp(value)[0] != 0.5:
                raise ValueError(f"{fmt.name}: {value} is not a power of two")
        ulp_at_max = 2.0 ** (math.floor(math.log2(fmt.max)) - fmt.mantissa_bits)
        return cls(
            name=fmt.name,
            dtype=getattr(torch, fmt.dtype),
            max=fmt.max,
            overflow_at=fmt.max + ulp_at_max / 2,
            smallest_normal=fmt.smallest_normal,
            smallest_subnormal=fmt.smallest_subnormal,
            per_tensor_scaled=fmt.name.startswith("fp8"),
        )

    @property
    def log2_normal(self) -> int:
        """``log2(smallest_normal)``, an integer."""
        return round(math.log2(self.smallest_normal))

    @property
    def log2_subnormal(self) -> int:
        """``log2(smallest_subnormal)``, an integer."""
        return round(math.log2(self.smallest_subnormal))


def format_limits() -> dict[str, FormatLimits]:
    """fp16, bf16 and (where this torch has them) fp8 e4m3 and e5m2, by name."""
    return {f.name: FormatLimits.of(f) for f in number_formats() if f.name in _LOW_FORMATS}


def effective_loss_scale(
    grad_max: float,
    fp16: FormatLimits,
    *,
    init_scale: float = 2.0**16,
    backoff_factor: float = 0.5,
    min_scale: float = 1.0,
) -> float:
    """The loss scale dynamic scaling settles on for gradients as large as ``grad_max``.

    Starting at ``init_scale``, the scaler backs off by ``backoff_factor`` on every overflowed
    step until the largest scaled gradient fits fp16 or ``min_scale`` is reached.
    """
    scale = init_scale
    while scale > min_scale and grad_max * scale >= fp16.overflow_at:
        scale = max(scale * backoff_factor, min_scale)
    return scale


@dataclass(frozen=True)
class Fit:
    """How a set of values would fare in one format.

    Attributes:
        scale: the factor applied before conversion (loss scale; per-tensor for fp8: None).
        overflow: fraction of finite values that would overflow.
        underflow: fraction of non-zero finite values that would become zero.
        subnormal: fraction of non-zero finite values that would become subnormal (not zero).
    """

    scale: float | None
    overflow: float
    underflow: float
    subnormal: float

    @property
    def lost(self) -> float:
        """``underflow + subnormal``: non-zero values that lose precision or vanish."""
        return self.underflow + self.subnormal


@dataclass
class RangeStats:
    """Accumulated statistics of the tensors one module saw in one phase.

    Attributes:
        count: values seen (all calls, all steps).
        zeros: exact zeros among them.
        nonfinite: inf/NaN values among them.
        max_abs: largest finite magnitude (0.0 when none).
        min_abs: smallest non-zero finite magnitude (inf when none).
        hist: ``floor(log2|x|)`` histogram of non-zero finite values (see ``HIST_MIN_EXPONENT``).
    """

    limits: dict[str, FormatLimits]
    count: int = 0
    zeros: int = 0
    nonfinite: int = 0
    max_abs: float = 0.0
    min_abs: float = math.inf
    hist: list[int] = field(default_factory=lambda: [0] * HIST_BINS)
    _overflow_at_1: dict[str, int] = field(default_factory=dict)
    _fp8: dict[str, list[int]] = field(default_factory=dict)

    def add(self, tensor: torch.Tensor) -> None:
        """Fold one tensor in (any floating dtype; measured as fp32). One host sync."""
        x = tensor.detach().reshape(-1).float()
        if x.numel() == 0:
            return
        finite = torch.isfinite(x)
        mag = x[finite].abs()
        nonzero = mag[mag > 0]
        counts = [x.numel(), int(x.numel()) - int(finite.sum()), mag.numel() - nonzero.numel()]
        if nonzero.numel() == 0:
            self._fold(counts, 0.0, math.inf, None, {}, {})
            return
        amax, amin = nonzero.max(), nonzero.min()
        exponent = torch.frexp(nonzero)[1].to(torch.int64) - 1 - HIST_MIN_EXPONENT
        hist = torch.bincount(exponent.clamp_(0, HIST_BINS - 1), minlength=HIST_BINS)
        over: dict[str, torch.Tensor] = {}
        fp8: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, lim in self.limits.items():
            if lim.per_tensor_scaled:
                scaled = nonzero * (lim.max / amax)
                half_sub = lim.smallest_subnormal / 2
                zero = (scaled <= half_sub).sum()
                sub = ((scaled > half_sub) & (scaled < lim.smallest_normal - half_sub)).sum()
                fp8[name] = (zero, sub)
            else:
                over[name] = (nonzero >= lim.overflow_at).sum()
        # one transfer for everything measured on this tensor
        packed = (
            torch.stack([amax, amin, *over.values(), *(v for pair in fp8.values() for v in pair)])
            .double()
            .tolist()
        )
        overflow = dict(zip(over, packed[2 : 2 + len(over)], strict=True))
        rest = packed[2 + len(over) :]
        fp8_counts = {n: rest[2 * i : 2 * i + 2] for i, n in enumerate(fp8)}
        self._fold(counts, packed[0], packed[1], hist.tolist(), overflow, fp8_counts)

    def _fold(
        self,
        counts: list[int],
        amax: float,
        amin: float,
        hist: list[int] | None,
        overflow: dict[str, float],
        fp8: dict[str, list[float]],
    ) -> None:
        self.count += counts[0]
        self.nonfinite += counts[1]
        self.zeros += counts[2]
        self.max_abs = max(self.max_abs, amax)
        self.min_abs = min(self.min_abs, amin)
        if hist is not None:
            self.hist = [a + b for a, b in zip(self.hist, hist, strict=True)]
        for name, value in overflow.items():
            self._overflow_at_1[name] = self._overflow_at_1.get(name, 0) + int(value)
        for name, (zero, sub) in fp8.items():
            acc = self._fp8.setdefault(name, [0, 0])
            acc[0] += int(zero)
            acc[1] += int(sub)

    @property
    def nonzero(self) -> int:
        """Non-zero finite values seen."""
        return self.count - self.zeros - self.nonfinite

    def _below(self, exponent: int) -> int:
        """Values with ``floor(log2|x|) < exponent``."""
        index = min(max(exponent - HIST_MIN_EXPONENT, 0), HIST_BINS)
        return sum(self.hist[:index])

    def fit(self, name: str, scale: float = 1.0) -> Fit:
        """How these values would fare in format ``name`` after multiplying by ``scale``.

        ``scale`` must be a power of two (loss scales are). fp8 formats ignore it: they are
        measured with per-tensor scaling. Overflow is exact at scale 1 and whenever nothing
        reaches the threshold; otherwise it counts the values whose exponent clears it (a
        lower bound).

        Raises:
            ValueError: ``scale`` is not a positive power of two, or ``name`` is unknown.
        """
        if name not in self.limits:
            raise ValueError(f"fit: unknown format {name!r}; known: {', '.join(self.limits)}")
        lim = self.limits[name]
        finite = self.count - self.nonfinite
        nonzero = self.nonzero
        if lim.per_tensor_scaled:
            zero, sub = self._fp8.get(name, [0, 0])
            return Fit(None, 0.0, _ratio(zero, nonzero), _ratio(sub, nonzero))
        if not (scale > 0 and math.frexp(scale)[0] == 0.5):
            raise ValueError(f"fit: scale {scale!r} is not a positive power of two")
        shift = round(math.log2(scale))
        if self.max_abs * scale < lim.overflow_at:
            over = 0
        elif shift == 0:
            over = self._overflow_at_1.get(name, 0)
        else:
            over = nonzero - self._below(math.floor(math.log2(lim.overflow_at)) + 1 - shift)
        zero = self._below(lim.log2_subnormal - 1 - shift)
        sub = self._below(lim.log2_normal - shift) - zero
        return Fit(float(scale), _ratio(over, finite), _ratio(zero, nonzero), _ratio(sub, nonzero))


def _ratio(part: float, whole: float) -> float:
    return float(part) / whole if whole else 0.0

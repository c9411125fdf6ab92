"""Range statistics agree with what a real cast to each format does."""

from __future__ import annotations

import math

import pytest
import torch

from ampkit.precision.float_formats import number_format
from ampkit.precision.stats import RangeStats, effective_loss_scale, format_limits

LIMITS = format_limits()


def _log_uniform(n: int, low: float, high: float, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    exponent = torch.empty(n, dtype=torch.float64).uniform_(low, high, generator=g)
    sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
    return (sign * torch.exp2(exponent)).float()


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e5m2"])
def test_overflow_threshold_is_where_a_cast_stops_being_finite(name):
    lim = LIMITS[name]
    at = torch.tensor(lim.overflow_at)
    below = torch.nextafter(at, torch.tensor(0.0))
    assert not torch.isfinite(at.to(lim.dtype).float())
    assert below.to(lim.dtype).float() == lim.max
    assert lim.max == number_format(lim.dtype).max  # from torch.finfo, not typed in


@pytest.mark.parametrize("scale", [1.0, 2.0**-3, 2.0**10, 2.0**16])
@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_fit_matches_real_casts_at_power_of_two_scales(name, scale):
    x = _log_uniform(20_000, -140, 20)
    stats = RangeStats(LIMITS)
    for chunk in x.split(7_000):
        stats.add(chunk)
    fit = stats.fit(name, scale)
    cast = (x * scale).to(LIMITS[name].dtype).float()
    finite = torch.isfinite(cast)
    normal = LIMITS[name].smallest_normal
    n = x.numel()
    assert round(fit.overflow * n) == int((~finite).sum())
    assert fit.underflow * n == pytest.approx(float((cast == 0).sum()), abs=1)
    sub = (cast != 0) & (cast.abs() < normal)
    # documented inexactness: values within half a subnormal below the smallest normal round
    # up to it, but the exponent histogram counts them as subnormal
    scaled = (x * scale).abs()
    sliver = ((scaled < normal) & (scaled >= normal - LIMITS[name].smallest_subnormal / 2)).sum()
    assert 0 <= round(fit.subnormal * n) - int(sub.sum()) <= int(sliver)


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_fit_matches_per_tensor_scaled_casts(name):
    lim = LIMITS[name]
    x = _log_uniform(5_000, -30, 5, seed=1)
    stats = RangeStats(LIMITS)
    stats.add(x)
    fit = stats.fit(name)
    cast = (x * (lim.max / x.abs().max())).to(lim.dtype).float()
    assert fit.overflow == 0
    assert fit.underflow * x.numel() == pytest.approx(float((cast == 0).sum()), abs=1)
    sub = (cast != 0) & (cast.abs() < lim.smallest_normal)
    assert fit.subnormal * x.numel() == pytest.approx(float(sub.sum()), abs=1)


def test_counts_zeros_nonfinite_and_extremes():
    stats = RangeStats(LIMITS)
    stats.add(torch.tensor([0.0, -3.0, float("inf"), float("nan"), 2.0**-20, 1e5]))
    assert (stats.count, stats.zeros, stats.nonfinite, stats.nonzero) == (6, 1, 2, 3)
    assert stats.max_abs == 1e5 and stats.min_abs == 2.0**-20
    assert stats.fit("fp16").overflow == pytest.approx(1 / 4)  # of the finite values
    assert stats.fit("fp16").subnormal == pytest.approx(1 / 3)  # of the non-zero finite values


def test_fit_rejects_a_scale_that_is_not_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        RangeStats(LIMITS).fit("fp16", 3.0)


def test_effective_loss_scale_is_the_scalers_backoff():
    fp16 = LIMITS["fp16"]
    assert effective_loss_scale(0.0, fp16) == 2.0**16
    assert effective_loss_scale(0.99, fp16) == 2.0**16
    assert effective_loss_scale(1.0, fp16) == 2.0**15  # 65536 >= 65520 overflows
    assert effective_loss_scale(3.0, fp16) == 2.0**14
    assert effective_loss_scale(1e6, fp16) == 1.0  # the minimum scale
    grad = 0.01
    scale = effective_loss_scale(grad, fp16, init_scale=2.0**24)
    assert grad * scale < fp16.overflow_at <= grad * scale * 2
    assert math.frexp(scale)[0] == 0.5

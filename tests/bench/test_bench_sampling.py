"""Adaptive sampling: the median's confidence interval, the stopping rule and the estimate of
how much longer would decide, on synthetic timings (no assertion on a measured time)."""

from __future__ import annotations

import math

import pytest

from ampkit import ConfigurationError
from ampkit.bench.report import PAYS_OFF_SPEEDUP, VariantResult, decide_verdict
from ampkit.bench.sampling import (
    Sampling,
    decided,
    median_interval,
    min_rounds_for,
    rounds_to_decide,
)
from ampkit.bench.timing import Timings, run_interleaved


def coverage(n: int, j: int) -> float:
    """The closed form: [x_(j), x_(n+1-j)] covers the median with 1 - 2 P(B <= j - 1)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n


@pytest.mark.parametrize(("n", "j"), [(6, 1), (10, 2), (20, 6), (100, 40)])
def test_interval_is_the_narrowest_order_statistics_with_95_percent(n, j):
    # the textbook 95% intervals of the median: x_(1..6), x_(2..9), x_(6..15), x_(40..61)
    values = [float(i) for i in range(n, 0, -1)]  # unsorted on purpose
    assert median_interval(values) == (j, n + 1 - j)
    assert coverage(n, j) >= 0.95 > coverage(n, j + 1)


def test_too_few_values_give_the_whole_range_and_six_are_needed_at_95_percent():
    assert min_rounds_for(0.95) == 6 and min_rounds_for(0.5) == 2
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert coverage(5, 1) < 0.95 <= coverage(6, 1)


def test_more_rounds_of_the_same_spread_narrow_the_interval():
    spread = [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]  # quartiles do not narrow
    narrow = [median_interval(spread * k) for k in (1, 4, 16)]
    widths = [high - low for low, high in narrow]
    assert widths[0] > widths[1] > widths[2]


def test_decided_is_wholly_on_one_side_of_the_threshold():
    assert decided((1.10, 1.3), 1.10) and decided((0.5, 1.09), 1.10)
    assert not decided((1.05, 1.2), 1.10) and not decided((1.0, 1.10), 1.10)


def test_bad_inputs_are_refused():
    with pytest.raises(ConfigurationError, match="no values"):
        median_interval([])
    with pytest.raises(ConfigurationError, match=r"confidence must lie in \(0, 1\)"):
        median_interval([1.0], confidence=1.0)


def test_estimate_scales_with_the_square_of_width_over_gap():
    # 20 speed-ups 1.11 .. 1.30: median 1.205, interval x_(6)..x_(15) = 1.16..1.25
    values = [1.10 + 0.01 * i for i in range(1, 21)]
    low, high = median_interval(values)
    assert (low, high) == pytest.approx((1.16, 1.25))
    assert rounds_to_decide(values, 1.10) == 20  # decided already
    wide = [1.205 + 3 * (v - 1.205) for v in values]  # three times the spread
    low, _ = median_interval(wide)
    width, gap = 1.205 - low, 1.205 - 1.10
    assert low < 1.10  # not decided
    assert rounds_to_decide(wide, 1.10) == math.ceil(20 * (width / gap) ** 2)


def test_a_median_on_the_threshold_cannot_be_decided_by_more_rounds():
    assert rounds_to_decide([1.0, 1.1, 1.2], 1.1) is None
    assert rounds_to_decide([1.3], 1.1) is None


def test_a_decided_interval_of_too_few_rounds_asks_for_the_minimum():
    assert rounds_to_decide([1.5, 1.6, 1.7], 1.1) == min_rounds_for()


def speedup_result(
    name: str, speedup: float, ci: tuple[float, float] | None = None
) -> VariantResult:
    return VariantResult(
        name=name, precision=name, compiled=False, channels_last=False,
        median_step_s=0.1 / speedup, throughput=1.0, speedup_vs_fp32=speedup,
        speedup_vs_fp32_twin=speedup, speedup_vs_fp32_twin_iqr=None,
        speedup_vs_fp32_twin_ci=ci, memory_bytes=None, memory_vs_fp32=None, losses=[2.0],
        final_loss=2.0, loss_gap_vs_fp32=0.0, mfu=None,
    )  # fmt: skip


CPU = {"device_type": "cpu", "device_name": "AMD EPYC", "native_low_precision": True}


def test_an_undecided_verdict_says_what_was_measured_and_how_long_would_decide():
    sampling = Sampling(
        min_rounds=20, rounds=240, seconds=61.2, budget_s=60, stopped="budget",
        more_rounds=300, more_seconds=76.5,
    )  # fmt: skip
    v = decide_verdict(
        [speedup_result("fp32", 1.0), speedup_result("bf16", 1.12, (1.04, 1.19))],
        matmul_share=0.9,
        sampling=sampling,
        **CPU,
    )
    assert v.pays_off is None and v.text.startswith("Inconclusive")
    assert "1.04x to 1.19x" in v.text
    assert "Measured 240 rounds in 61 s (budget 60 s)" in v.text
    assert "about 300 more rounds (~76 s more at this rate)" in v.text
    assert "rerun with --budget 140" in v.text  # 61.2 + 76.5 s, rounded up to 10 s


def test_an_undecided_verdict_at_the_threshold_says_more_rounds_will_not_decide():
    sampling = Sampling(min_rounds=20, rounds=99, seconds=60.0, budget_s=60, stopped="budget")
    v = decide_verdict(
        [speedup_result("fp32", 1.0), speedup_result("bf16", 1.10, (1.05, 1.15))],
        matmul_share=0.9,
        sampling=sampling,
        **CPU,
    )
    assert v.pays_off is None and "not expected to decide it" in v.text


def synthetic(speedups: list[float]) -> Timings:
    rounds = len(speedups)
    return Timings(
        names=["fp32", "bf16"],
        times={"fp32": [1.0] * rounds, "bf16": [1.0 / s for s in speedups]},
        probes=[1.0] * (rounds + 1),
        kept=list(range(rounds)),
    )


def test_the_stopping_rule_waits_for_the_interval_to_leave_the_threshold():
    from ampkit.bench.run import _decided, _sampling

    pairs = [("bf16", "fp32")]
    clear = synthetic([1.4, 1.5, 1.45, 1.42, 1.48, 1.44])
    assert _decided(clear, pairs)
    assert not _decided(synthetic([1.4, 1.5, 1.45]), pairs)  # 3 rounds: no 95% interval yet
    close = synthetic([0.9, 1.3, 1.0, 1.25, 1.05, 1.3, 0.95, 1.2])
    assert not _decided(close, pairs)
    close.seconds = 8.0
    s = _sampling(close, pairs, steps=8, budget_s=8.0)
    assert s.stopped == "budget" and s.more_rounds is not None and s.more_rounds > 0
    assert s.more_seconds == pytest.approx(s.more_rounds * 1.0)  # 1 s a round, as measured
    assert _sampling(clear, pairs, steps=6, budget_s=60).stopped == "decided"
    assert _sampling(clear, pairs, steps=6, budget_s=None).stopped == "fixed"
    assert _sampling(clear, [], steps=6, budget_s=60).stopped == "nothing to decide"


def test_adaptive_rounds_stop_once_the_synthetic_speedup_is_decided():
    """Steps that take fixed synthetic times on a fake clock: bf16 always 1.5x fp32, with
    one noisy round in three; the run stops at the first round where the rule holds."""
    from ampkit.bench.run import _decided

    now = [0.0]
    pattern = [1.0, 1.0, 3.0]  # fp32's third round is slowed: per-round speed-up 1.5 or 4.5

    def fp32(i: int) -> None:
        now[0] += pattern[i % 3] * 0.3

    def bf16(i: int) -> None:
        now[0] += 0.2

    checks: list[int] = []

    def until(t: Timings) -> bool:
        checks.append(t.rounds)
        return _decided(t, [("bf16", "fp32")])

    timings = run_interleaved(
        {"fp32": fp32, "bf16": bf16}, rounds=3, warmup=0, probe=lambda: 1.0,
        clock=lambda: now[0], until=until, budget_s=1e9,
    )  # fmt: skip
    assert checks == [3, 4, 5, 6]  # 6 rounds: the first with a 95% interval, 1.5..4.5
    assert timings.rounds == 6
    assert median_interval([0.3 * pattern[k % 3] / 0.2 for k in range(6)])[0] >= PAYS_OFF_SPEEDUP

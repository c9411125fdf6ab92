"""A machine whose speed never settles gives a report flagged NOISY, not an abort."""

from __future__ import annotations

import itertools

import pytest

from ampkit import ConfigurationError
from ampkit.bench import run_bench
from ampkit.bench.timing import Timings
from ampkit.bench.workloads import gpt_workload


def timings(kept: list[int], rounds: int) -> Timings:
    return Timings(
        names=["a", "b"],
        times={"a": [2.0 + k for k in range(rounds)], "b": [1.0] * rounds},
        probes=[1.0] * (rounds + 1),
        kept=kept,
    )


def test_no_steady_round_uses_every_round_and_is_noisy():
    t = timings([], 5)
    assert t.used == [0, 1, 2, 3, 4] and t.noisy
    assert t.ratio("a", "b") == pytest.approx(4.0)
    assert t.ratio_quartiles("a", "b") == pytest.approx((3.0, 5.0))


def test_enough_steady_rounds_are_used_alone():
    t = timings([0, 1, 2, 3], 5)
    assert t.used == [0, 1, 2, 3] and not t.noisy


def test_fewer_than_three_rounds_fail():
    with pytest.raises(ConfigurationError, match="only 2 timed round"):
        timings([0, 1], 2).median("a")


def test_run_bench_on_a_machine_that_never_settles_reports_noisy():
    probes = itertools.cycle([1.0, 5.0])  # every round sees the machine change speed
    report = run_bench(
        gpt_workload(batch_size=2, seq_len=16, n_layer=1, n_embd=32, n_head=2),
        ["fp32"],
        device="cpu",
        steps=4,
        warmup=1,
        burst_s=None,
        probe=lambda: next(probes),
    )
    assert report.rounds_kept == 0 and report.noisy
    assert report.render().startswith("NOISY: only 0 of 4 rounds ran on a steady machine")
    assert report.variant("fp32").median_step_s > 0
    assert report.matmul_share is None  # no reason from timings the noise check rejected

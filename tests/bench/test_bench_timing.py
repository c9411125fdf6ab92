"""Interleaving order, probe-based round dropping and paired-ratio medians, on synthetic data."""

from __future__ import annotations

import statistics

import pytest

from ampkit.bench.timing import kept_rounds, paired_ratio, round_orders, run_interleaved
from ampkit.errors import ConfigurationError


def test_every_round_runs_every_variant_once():
    names = ["fp32", "bf16", "fp16", "bf16+compile"]
    for order in round_orders(names, 9, seed=3):
        assert sorted(order) == sorted(names)


def test_each_variant_takes_each_position_equally_often():
    names = ["a", "b", "c"]
    orders = round_orders(names, 6, seed=1)
    for position in range(3):
        firsts = [order[position] for order in orders]
        assert {n: firsts.count(n) for n in names} == {"a": 2, "b": 2, "c": 2}


def test_order_is_seeded():
    names = ["a", "b", "c", "d"]
    assert round_orders(names, 4, seed=7) == round_orders(names, 4, seed=7)
    seeds = {tuple(round_orders(names, 1, seed=s)[0]) for s in range(20)}
    assert len(seeds) > 1


@pytest.mark.parametrize("names", [[], ["a", "a"]])
def test_bad_variant_names_raise(names):
    with pytest.raises(ConfigurationError):
        round_orders(names, 3)


def test_round_next_to_a_moved_probe_is_dropped():
    # probes are taken between rounds: round k sits between probes[k] and probes[k+1]
    probes = [1.0, 1.0, 1.0, 3.0, 1.0, 1.05, 0.97]
    assert kept_rounds(probes, tolerance=0.25) == [0, 1, 4, 5]


def test_steady_machine_keeps_every_round():
    assert kept_rounds([2.0] * 6, tolerance=0.01) == [0, 1, 2, 3, 4]


def test_tolerance_is_relative_to_the_median():
    probes = [1.0, 1.2, 1.0, 1.0]
    assert kept_rounds(probes, tolerance=0.25) == [0, 1, 2]
    assert kept_rounds(probes, tolerance=0.1) == [2]


@pytest.mark.parametrize(("probes", "tol"), [([1.0], 0.2), ([1.0, 1.0], 0.0), ([1.0, 0.0], 0.2)])
def test_bad_probe_input_raises(probes, tol):
    with pytest.raises(ConfigurationError):
        kept_rounds(probes, tol)


def test_paired_ratio_is_immune_to_a_throttled_phase():
    # the machine runs 5x slower in rounds 3-5, affecting both variants alike
    slow = [1, 1, 1, 5, 5, 5, 1, 1]
    fp32 = [0.010 * s for s in slow]
    bf16 = [0.030 * s for s in slow]
    keep = list(range(8))
    assert paired_ratio(bf16, fp32, keep) == pytest.approx(3.0)
    # a ratio of medians taken from separate blocks would not be: block A fast, block B slow
    assert statistics.median(bf16[3:6]) / statistics.median(fp32[:3]) == pytest.approx(15.0)


def test_paired_ratio_takes_the_median_over_kept_rounds_only():
    a = [2.0, 2.0, 100.0, 2.0, 3.0]
    b = [1.0, 1.0, 1.0, 1.0, 1.0]
    assert paired_ratio(a, b, [0, 1, 3, 4]) == pytest.approx(2.0)
    assert paired_ratio(a, b, [4]) == pytest.approx(3.0)


def test_paired_ratio_without_kept_rounds_raises():
    with pytest.raises(ConfigurationError, match="no rounds were kept"):
        paired_ratio([1.0], [1.0], [])


def test_run_interleaved_runs_rounds_in_the_planned_order_and_drops_drifting_rounds():
    log: list[tuple[str, int]] = []
    probe_values = iter([1.0, 1.0, 9.0, 1.0, 1.0, 1.0])  # 5 timed rounds -> 6 probes

    def make(name):
        return lambda i: log.append((name, i))

    timings = run_interleaved(
        {"x": make("x"), "y": make("y"), "z": make("z")},
        rounds=5,
        warmup=2,
        probe=lambda: next(probe_values),
        tolerance=0.25,
        seed=4,
    )
    planned = round_orders(["x", "y", "z"], 7, seed=4)
    assert log == [(name, i) for i, order in enumerate(planned) for name in order]
    assert timings.orders == planned[2:]
    assert {len(t) for t in timings.times.values()} == {5}
    assert timings.kept == [0, 3, 4]  # rounds 1 and 2 touch the 9.0 probe
    assert timings.rounds == 5


class FakeClock:
    """A clock that moves only when a step says it took time: timings without timing."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_run_interleaved_times_each_step_itself():
    clock = FakeClock()
    durations = {"fast": 0.001, "slow": 0.006}
    steps = {name: (lambda i, d=d: clock.advance(d)) for name, d in durations.items()}
    timings = run_interleaved(steps, rounds=4, warmup=1, probe=lambda: 1.0, clock=clock)
    assert timings.times == {"fast": [pytest.approx(0.001)] * 4, "slow": [pytest.approx(0.006)] * 4}
    assert timings.ratio("slow", "fast") == pytest.approx(6.0)


def test_rest_between_bursts_is_taken(monkeypatch):
    from ampkit.bench import timing

    rests: list[float] = []
    monkeypatch.setattr(timing.time, "sleep", rests.append)  # record the rests, sleep none
    run_interleaved(
        {"a": lambda i: None},
        rounds=3,
        warmup=0,
        probe=lambda: 1.0,
        burst_s=0.0,
        rest_s=0.02,
    )
    assert rests == [0.02, 0.02]  # a burst of 0 s: a rest between every two rounds


def test_until_adds_rounds_until_it_holds():
    clock = FakeClock()
    seen: list[int] = []

    def until(t):
        seen.append(t.rounds)
        return t.rounds == 7

    timings = run_interleaved(
        {"a": lambda i: clock.advance(1.0)},
        rounds=4,
        warmup=1,
        probe=lambda: 1.0,
        clock=clock,
        until=until,
        budget_s=1e9,
    )
    assert seen == [4, 5, 6, 7]  # asked after the minimum rounds, then after each added one
    assert timings.rounds == 7 and len(timings.times["a"]) == 7 and len(timings.probes) == 8
    assert len(timings.orders) == 7


def test_the_budget_stops_an_until_that_never_holds():
    timings = run_interleaved(
        {"a": lambda i: None}, rounds=3, warmup=0, probe=lambda: 1.0, until=lambda t: False,
        budget_s=0.0,
    )  # fmt: skip
    assert timings.rounds == 3  # the minimum is always run; a spent budget adds nothing


def test_until_without_a_budget_is_refused():
    with pytest.raises(ConfigurationError, match="until= needs a time budget_s"):
        run_interleaved({"a": lambda i: None}, rounds=3, until=lambda t: True)


def test_ratio_quartiles_from_kept_rounds():
    from ampkit.bench.timing import Timings

    t = Timings(
        names=["a", "b"],
        times={"a": [1.0, 2.0, 3.0, 4.0, 50.0], "b": [1.0] * 5},
        probes=[1.0] * 6,
        kept=[0, 1, 2, 3],
    )
    assert t.ratio_quartiles("a", "b") == pytest.approx((1.75, 3.25))
    assert t.ratio("a", "b") == pytest.approx(2.5)

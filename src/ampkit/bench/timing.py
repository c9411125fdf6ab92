"""Interleaved step timing that survives a machine whose speed drifts under load.

Small CPU machines slow down 3-10x after about a minute of sustained load and recover when
idle; other jobs come and go. Timing one variant as a block and then the next measures the
machine, not the variant. So:

1. every round runs one step of *every* variant, in an order rotated each round (each variant
   runs first, second, ... equally often), so slow phases hit all variants alike;
2. a fixed matmul probe is timed between rounds; a round is dropped when the probe before or
   after it moved more than ``tolerance`` from the probe's median (the machine changed speed
   during the round);
3. results are medians of per-round paired ratios (``t_a[k] / t_b[k]`` over the kept rounds
   ``k``), never a ratio of two separately taken averages.

On a machine whose speed never settles (a shared 2-core box), fewer than :data:`MIN_ROUNDS`
rounds may be kept. The statistics then use every round and the run is marked noisy
(:attr:`Timings.noisy`) rather than failing: what was measured is still reported, with its
spread. Only a run of fewer than :data:`MIN_ROUNDS` rounds in total has nothing to report.

The pure parts (:func:`round_orders`, :func:`kept_rounds`, :func:`paired_ratio`) take plain
numbers so tests can feed them synthetic timings; :func:`run_interleaved` drives real steps.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ampkit.errors import ConfigurationError

__all__ = [
    "MIN_ROUNDS",
    "Timings",
    "cpu_clock_session",
    "kept_rounds",
    "matmul_probe",
    "paired_ratio",
    "round_orders",
    "run_interleaved",
]


#: Rounds needed for a median and quartiles; fewer kept rounds fall back to all rounds.
MIN_ROUNDS = 3


def round_orders(names: Sequence[str], rounds: int, seed: int = 0) -> list[list[str]]:
    """The order variants run in, for each round.

    A seeded shuffle of ``names`` rotated by one place per round: every round holds every
    variant once, and over any ``len(names)`` consecutive rounds each variant takes each
    position exactly once, so no variant always runs first (cold caches) or last.

    Raises:
        ConfigurationError: ``names`` is empty or has duplicates, or ``rounds`` < 0.
    """
    if not names or len(set(names)) != len(names):
        raise ConfigurationError(
            f"round_orders: variant names must be non-empty and distinct, got {list(names)!r}."
        )
    if rounds < 0:
        raise ConfigurationError(f"round_orders: rounds must be >= 0, got {rounds!r}.")
    base = list(names)
    random.Random(seed).shuffle(base)
    n = len(base)
    return [base[r % n :] + base[: r % n] for r in range(rounds)]


def kept_rounds(probes: Sequence[float], tolerance: float) -> list[int]:
    """Indices of the rounds to keep, given the probe times taken between rounds.

    ``probes`` has one entry before each round and one after the last (``rounds + 1``
    values). Round ``k`` is kept when both ``probes[k]`` and ``probes[k + 1]`` lie within
    ``tolerance`` (relative) of the median probe, i.e. the machine ran at its usual speed on
    both sides of the round.

    Raises:
        ConfigurationError: fewer than two probes, a non-positive probe, or ``tolerance`` <= 0.
    """
    if len(probes) < 2:
        raise ConfigurationError(
            f"kept_rounds: need a probe before and after each round (>= 2), got {len(probes)}."
        )
    if tolerance <= 0:
        raise ConfigurationError(f"kept_rounds: tolerance must be > 0, got {tolerance!r}.")
    if min(probes) <= 0:
        raise ConfigurationError("kept_rounds: probe times must be positive.")
    median = statistics.median(probes)
    steady = [abs(p / median - 1.0) <= tolerance for p in probes]
    return [k for k in range(len(probes) - 1) if steady[k] and steady[k + 1]]


def paired_ratio(
    numerator: Sequence[float], denominator: Sequence[float], keep: Sequence[int]
) -> float:
    """Median over the kept rounds ``k`` of ``numerator[k] / denominator[k]``.

    Raises:
        ConfigurationError: no rounds kept, or a kept index out of range.
    """
    if not keep:
        raise ConfigurationError(
            "paired_ratio: no rounds were kept; the machine's speed kept changing. "
            "Run with more steps, a looser probe tolerance, or on a quieter machine."
        )
    if max(keep) >= min(len(numerator), len(denominator)) or min(keep) < 0:
        raise ConfigurationError("paired_ratio: a kept round index is out of range.")
    return statistics.median(numerator[k] / denominator[k] for k in keep)


@contextmanager
def cpu_clock_session() -> Iterator[Callable[[], float]]:
    """Torch on one intra-op thread for the block; yields ``time.thread_time``, restored after.

    The clock a CPU benchmark is judged by. Wall time counts the seconds a step waits for a
    core another process holds, so a busy neighbour inflates it many times over; the CPU
    time of the thread doing the work does not. With torch on several threads the main
    thread's CPU time misses the others' work, and the process's CPU time
    (``time.process_time``) is inflated by contention too: the OpenMP workers spin while
    they wait for one that was descheduled (measured on a 2-core EPYC with a busy loop on
    the other core: a 512x512 matmul loop went from 49 to 72 ms process time on 2 threads,
    and stayed at 47 ms thread time on 1). So the block runs torch on one thread, where
    every CPU op of a step, backward included, runs on the calling thread and its thread
    time is the step's whole CPU work.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield time.thread_time
    finally:
        torch.set_num_threads(threads)


def matmul_probe(
    size: int = 256,
    repeats: int = 8,
    tries: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> Callable[[], float]:
    """A fixed CPU matmul workload; calling the result returns its time in seconds.

    ``clock`` is what it is timed with: the clock the steps are timed with, so the probe
    checks the noise of the measurements actually used (wall time by default).

    The operands are made once, so every call does identical work: changes in its time are
    changes in the machine (clock throttling, a neighbour's load), not in the probe. Each
    call returns the fastest of ``tries`` runs, so a single scheduler hiccup does not count
    as a slow machine while a throttled clock (which slows every try) does. The probe runs
    once when made, so the first reading is not a cold start.
    """
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)

    def once() -> float:
        start = clock()
        for _ in range(repeats):
            torch.mm(a, b)
        return clock() - start

    def probe() -> float:
        return min(once() for _ in range(tries))

    probe()
    return probe


@dataclass
class Timings:
    """Per-round step times of every variant, the probes around them and the kept rounds.

    Attributes:
        names: the variants, in the order given.
        times: seconds per timed round, per variant (warm-up rounds excluded).
        probes: probe seconds before each timed round and after the last (``rounds + 1``).
        kept: indices of the timed rounds kept by :func:`kept_rounds`.
        orders: the order the variants ran in, per timed round.
        tolerance: the probe tolerance used.
        wall: wall seconds per timed round, per variant, when ``times`` is another clock
            (empty when ``times`` is wall time).
        clock: what ``times`` measures: ``"wall"`` or ``"cpu"`` (thread CPU time).
        seconds: wall seconds from the first timed round to the last probe (probes and
            rests included): what the timed rounds cost.
    """

    names: list[str]
    times: dict[str, list[float]]
    probes: list[float]
    kept: list[int]
    orders: list[list[str]] = field(default_factory=list)
    tolerance: float = 0.25
    wall: dict[str, list[float]] = field(default_factory=dict)
    clock: str = "wall"
    seconds: float = 0.0

    @property
    def rounds(self) -> int:
        """Timed rounds run (kept or not)."""
        return len(self.probes) - 1

    @property
    def used(self) -> list[int]:
        """The rounds the statistics use: the kept ones, or every round when fewer than
        :data:`MIN_ROUNDS` were kept (the run is then :attr:`noisy`).

        Raises:
            ConfigurationError: fewer than :data:`MIN_ROUNDS` rounds were run at all.
        """
        if len(self.kept) >= MIN_ROUNDS:
            return list(self.kept)
        if self.rounds < MIN_ROUNDS:
            raise ConfigurationError(
                f"timings: only {self.rounds} timed round(s) ran; a median and its spread need "
                f"at least {MIN_ROUNDS}. Run with --steps {MIN_ROUNDS} or more."
            )
        return list(range(self.rounds))

    @property
    def noisy(self) -> bool:
        """Fewer than half the rounds (or than :data:`MIN_ROUNDS`) ran on a steady machine:
        the figures are rough, whichever rounds they come from."""
        return len(self.kept) < max(MIN_ROUNDS, self.rounds // 2)

    def median(self, name: str) -> float:
        """Median step seconds of ``name`` over the :attr:`used` rounds.

        Raises:
            ConfigurationError: fewer than :data:`MIN_ROUNDS` rounds were run.
        """
        return statistics.median(self.times[name][k] for k in self.used)

    def quartiles(self, name: str) -> tuple[float, float]:
        """Lower and upper quartile of ``name``'s step seconds over the :attr:`used` rounds."""
        q1, _, q3 = statistics.quantiles(
            [self.times[name][k] for k in self.used], n=4, method="inclusive"
        )
        return q1, q3

    def wall_median(self, name: str) -> float:
        """Median wall seconds of ``name`` over the :attr:`used` rounds (``times`` when those
        are wall time)."""
        source = self.wall.get(name) or self.times[name]
        return statistics.median(source[k] for k in self.used)

    def ratio(self, numerator: str, denominator: str) -> float:
        """Median paired ratio ``t[numerator] / t[denominator]`` over the :attr:`used` rounds."""
        return paired_ratio(self.times[numerator], self.times[denominator], self.used)

    def ratio_quartiles(self, numerator: str, denominator: str) -> tuple[float, float]:
        """Lower and upper quartile of the paired ratios over the :attr:`used` rounds.

        Raises:
            ConfigurationError: fewer than :data:`MIN_ROUNDS` rounds were run.
        """
        ratios = [self.times[numerator][k] / self.times[denominator][k] for k in self.used]
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        return q1, q3


def run_interleaved(
    steps: Mapping[str, Callable[[int], None]],
    *,
    rounds: int,
    warmup: int = 1,
    probe: Callable[[], float] | None = None,
    tolerance: float = 0.25,
    sync: Callable[[], None] | None = None,
    prepare: Callable[[str, int], None] | None = None,
    burst_s: float | None = None,
    rest_s: float = 0.0,
    seed: int = 0,
    on_round: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    clock_name: str = "wall",
    until: Callable[[Timings], bool] | None = None,
    budget_s: float | None = None,
) -> Timings:
    """Time ``steps`` interleaved: each round runs one step of every variant.

    With ``until`` and ``budget_s``, ``rounds`` is a minimum: after it, rounds are added one
    at a time until ``until(timings so far)`` is true or the timed rounds have taken
    ``budget_s`` wall seconds (probes and rests included), whichever comes first.

    Args:
        steps: variant name -> ``step(i)`` running training step ``i`` of that variant.
        rounds: timed rounds; the total steps per variant is ``warmup + rounds``.
        warmup: untimed rounds first (allocator, autotuning, compilation).
        probe: the drift probe; default :func:`matmul_probe`.
        tolerance: drop a round when a probe next to it moved more than this (relative).
        sync: called before reading the clock (``torch.cuda.synchronize`` on CUDA).
        prepare: ``prepare(name, i)`` runs untimed just before ``step(i)`` (e.g. moving
            the batch to the device).
        burst_s: after this many seconds of back-to-back rounds, sleep ``rest_s`` so the
            machine does not reach its throttled state (None: never rest).
        rest_s: seconds to rest after each burst.
        seed: seeds the variant order (:func:`round_orders`).
        on_round: ``on_round(done, total)`` after every round (progress bars).
        clock: what a step is timed with: wall time by default; ``time.thread_time`` with
            torch on one thread (:func:`cpu_clock_session`) measures CPU work that other
            processes cannot inflate. Wall time is recorded as well (:attr:`Timings.wall`).
        clock_name: how :attr:`Timings.clock` names ``clock`` (``"wall"`` or ``"cpu"``).
        until: the stopping rule of adaptive sampling, asked after every timed round from
            the ``rounds``-th on; None: exactly ``rounds`` rounds.
        budget_s: wall seconds of timed rounds after which adaptive sampling stops even
            when ``until`` is not met (required with ``until``).

    Raises:
        ConfigurationError: ``rounds`` < 1, ``warmup`` < 0, or ``until`` without a
            non-negative ``budget_s``.
    """
    if rounds < 1 or warmup < 0:
        raise ConfigurationError(
            f"run_interleaved: need rounds >= 1 and warmup >= 0, got {rounds} and {warmup}."
        )
    if until is not None and (budget_s is None or not budget_s >= 0):
        raise ConfigurationError(
            f"run_interleaved: until= needs a time budget_s >= 0, got {budget_s!r}."
        )
    probe = probe if probe is not None else matmul_probe()
    sync = sync if sync is not None else (lambda: None)
    names = list(steps)
    # round r runs in the order cycle[r % len(names)] (round_orders rotates one place a round)
    cycle = round_orders(names, len(names), seed)
    times: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    probes: list[float] = []
    orders: list[list[str]] = []

    def timings() -> Timings:
        return Timings(
            names=names,
            times=times,
            probes=probes,
            kept=kept_rounds(probes, tolerance),
            orders=orders[warmup:],
            tolerance=tolerance,
            wall={} if clock_name == "wall" else wall,
            clock=clock_name,
            seconds=time.perf_counter() - timed_start,
        )

    burst_start = time.perf_counter()
    timed_start = burst_start
    total = warmup + rounds
    i = 0
    while True:
        order = cycle[i % len(cycle)]
        orders.append(order)
        if i == warmup:  # the probe before the first timed round
            probes.append(probe())
            timed_start = time.perf_counter()
        for name in order:
            if prepare is not None:
                prepare(name, i)
            sync()
            start, wall_start = clock(), time.perf_counter()
            steps[name](i)
            sync()
            elapsed, wall_elapsed = clock() - start, time.perf_counter() - wall_start
            if i >= warmup:
                times[name].append(elapsed)
                wall[name].append(wall_elapsed)
        if i >= warmup:  # after this round, before the next
            probes.append(probe())
        i += 1
        if on_round is not None:
            on_round(i, max(total, i))
        if i >= total:
            if until is None or until(timings()):
                break
            if time.perf_counter() - timed_start >= (budget_s or 0.0):
                break
        if burst_s is not None and time.perf_counter() - burst_start > burst_s:
            time.sleep(rest_s)
            burst_start = time.perf_counter()
    return timings()

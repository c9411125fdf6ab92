"""The benchmark's result: per-variant numbers, the verdict, and how they are shown.

:class:`BenchReport` is plain data. :meth:`BenchReport.render` draws the terminal table,
:meth:`BenchReport.to_dict` is the ``--json`` document (schema ``ampkit.bench/2``) and
:func:`save_plot` draws ``--plot``. :func:`decide_verdict` is the plain-language answer to
"does mixed precision pay off for this model on this machine", as a pure function of the
measurements.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ampkit._files import atomic_write, json_safe
from ampkit._text_table import text_table
from ampkit.bench.sampling import Sampling
from ampkit.errors import MissingDependencyError

__all__ = [
    "SCHEMA",
    "BenchReport",
    "VariantResult",
    "Verdict",
    "decide_verdict",
    "inconclusive",
    "save_plot",
]

#: Identifies the layout of :meth:`BenchReport.to_dict`; bumped when a field changes meaning.
SCHEMA = "ampkit.bench/2"

#: A low precision "pays off" when it is at least this much faster than fp32 (median ratio).
PAYS_OFF_SPEEDUP = 1.10
#: Below this share of the fp32 step spent in matrix multiplication, a model is called
#: elementwise- or overhead-bound: faster matmuls cannot speed it up much.
MATMUL_BOUND_SHARE = 0.3
#: A final loss further than this (relative) from fp32's is flagged.
LOSS_GAP_TOLERANCE = 0.05


@dataclass(frozen=True, kw_only=True)
class VariantResult:
    """Measurements of one variant (a precision, optionally compiled or channels-last).

    Attributes:
        name: ``bf16``, ``bf16+compile``, ``fp32+channels_last``, ...
        precision: ``fp32``, ``fp16`` or ``bf16``.
        compiled: trained through ``torch.compile``.
        channels_last: model and 4-D inputs in channels-last memory format.
        median_step_s: median seconds per training step over the kept rounds, by the
            report's :attr:`~BenchReport.clock` (CPU time on a CPU device).
        throughput: items (``unit`` of the report) per second at the median step time.
        speedup_vs_fp32: median over kept rounds of ``t_fp32 / t_variant`` (eager fp32
            is the baseline); None when fp32 was not measured.
        speedup_vs_fp32_twin: the same against the fp32 variant with the same compile and
            channels-last settings: what the precision alone buys. The verdict uses it.
        speedup_vs_fp32_twin_iqr: lower and upper quartile of those per-round ratios (their
            spread, which more rounds do not narrow).
        speedup_vs_fp32_twin_ci: the 95% confidence interval of their median
            (:func:`~ampkit.bench.sampling.median_interval`; the whole range below 6
            rounds), which more rounds narrow. The verdict is judged by it.
        memory_bytes: CUDA: peak allocated during a step as if alone; CPU: bytes saved for
            backward (None when they could not be measured, e.g. under ``torch.compile``).
        memory_vs_fp32: ``memory_bytes`` over the fp32 twin's (same compile/channels-last).
        losses: training loss of every step, warm-up included (same batches for all variants).
        final_loss: the loss of the last step.
        loss_gap_vs_fp32: ``final_loss`` minus the fp32 twin's.
        mfu: model FLOPs utilisation against the device's dense peak (CUDA only).
        reason: the policy's one-line reason for this precision on this hardware.
        step_s_iqr: lower and upper quartile of the step seconds (same clock).
        wall_median_step_s: median wall seconds per step (what contention inflates).
    """

    name: str
    precision: str
    compiled: bool
    channels_last: bool
    median_step_s: float
    throughput: float
    speedup_vs_fp32: float | None
    speedup_vs_fp32_twin: float | None
    speedup_vs_fp32_twin_iqr: tuple[float, float] | None
    memory_bytes: int | None
    memory_vs_fp32: float | None
    losses: list[float]
    final_loss: float
    loss_gap_vs_fp32: float | None
    mfu: float | None
    reason: str = ""
    step_s_iqr: tuple[float, float] | None = None
    wall_median_step_s: float | None = None
    speedup_vs_fp32_twin_ci: tuple[float, float] | None = None


@dataclass(frozen=True)
class Verdict:
    """Whether mixed precision pays off, and why, in one paragraph.

    Attributes:
        pays_off: True / False, or None when no low precision was measured against fp32.
        text: the plain-language explanation shown under the table.
        best: the fastest low-precision variant, if any.
    """

    pays_off: bool | None
    text: str
    best: str | None = None


def _times(speedup: float, twin: str) -> str:
    if speedup >= 1:
        return f"{speedup:.2f}x as fast as {twin}"
    return f"{1 / speedup:.1f}x slower than {twin}"


def inconclusive(interval: tuple[float, float] | None, threshold: float = PAYS_OFF_SPEEDUP) -> bool:
    """The one rule every verdict uses: the confidence interval of the median per-round
    speed-up straddles the pay-off threshold.

    A verdict is definite only when the interval lies wholly on one side of ``threshold``
    (below, the "no gain" side: does not pay off; at or above: pays off). The median lies
    inside its interval, so a definite verdict agrees with it. None (no interval measured)
    is not inconclusive: the median decides.
    """
    return interval is not None and interval[0] < threshold <= interval[1]


def decide_verdict(
    variants: list[VariantResult],
    *,
    device_type: str,
    device_name: str,
    native_low_precision: bool | None,
    matmul_share: float | None,
    sampling: Sampling | None = None,
) -> Verdict:
    """Say whether mixed precision pays off, from measured speed-ups, memory and losses.

    Args:
        variants: the measured variants; the eager ``fp32`` one is the baseline.
        device_type: ``cpu`` or ``cuda``.
        device_name: the CPU or GPU model, for the explanation.
        native_low_precision: whether the device has native bf16/fp16 arithmetic (None: unknown).
        matmul_share: share of the fp32 step that its matmul FLOPs take at the device's
            measured (CPU) or peak (CUDA) fp32 matmul speed; None when unknown.
        sampling: how the rounds were sampled; an inconclusive verdict then says what was
            measured and how much longer would decide it.
    """
    low = [v for v in variants if v.precision != "fp32" and v.speedup_vs_fp32_twin is not None]
    if not low:
        return Verdict(
            None,
            "Mixed precision was not measured: add a low precision, e.g. "
            "--precisions fp32,bf16, to compare it with fp32.",
        )
    best = max(low, key=lambda v: v.speedup_vs_fp32_twin or 0.0)
    speedup = best.speedup_vs_fp32_twin or 0.0
    twin = "fp32" + best.name[len(best.precision) :]
    memory = (
        f", and needs {best.memory_vs_fp32:.2f}x {twin}'s memory"
        if best.memory_vs_fp32 is not None
        else ""
    )
    loss_note = ""
    fp32 = next(
        (
            v
            for v in variants
            if v.precision == "fp32"
            and (v.compiled, v.channels_last) == (best.compiled, best.channels_last)
        ),
        None,
    )
    gap = best.loss_gap_vs_fp32
    if fp32 is not None and gap is not None and math.isfinite(fp32.final_loss):
        if not math.isfinite(best.final_loss) or abs(gap) > LOSS_GAP_TOLERANCE * abs(
            fp32.final_loss
        ):
            loss_note = (
                f" Its loss after {len(best.losses)} steps differs from fp32's by {gap:+.3f}; "
                "check accuracy before switching."
            )
    interval = best.speedup_vs_fp32_twin_ci
    if interval is not None and inconclusive(interval):
        return Verdict(
            None,
            f"Inconclusive: {best.name} measured {_times(speedup, twin)} at the median, but "
            f"its 95% confidence interval, {interval[0]:.2f}x to {interval[1]:.2f}x, "
            f"straddles the {PAYS_OFF_SPEEDUP:.2f}x it takes to pay off: the machine's "
            "noise is as large as the effect. " + _undecided(sampling),
            best.name,
        )
    if speedup >= PAYS_OFF_SPEEDUP:
        return Verdict(
            True,
            f"Mixed precision pays off here: {best.name} is {_times(speedup, twin)}{memory}."
            + loss_note,
            best.name,
        )
    head = (
        f"Mixed precision does not pay off here: the fastest low precision, {best.name}, is "
        f"{_times(speedup, twin)} (median of paired per-step ratios){memory}."
    )
    if device_type == "cpu" and native_low_precision is False:
        why = (
            f" Why: this CPU ({device_name}) has no native bf16 or fp16 arithmetic (no "
            "AVX512-BF16, AVX512-FP16 or AMX), so every low-precision matmul is emulated with "
            "conversions around fp32 math. Train in fp32, which --precision auto picks here."
        )
    elif matmul_share is not None and matmul_share < MATMUL_BOUND_SHARE:
        why = (
            f" Why: the model is too small or elementwise-bound: its matrix multiplications "
            f"would take only {matmul_share:.0%} of the fp32 step at this device's fp32 matmul "
            "speed; the rest (elementwise ops, normalisation, the optimizer, launch overhead) "
            "does not get faster in low precision. Larger batches or wider layers shift the "
            "balance."
        )
    else:
        why = (
            " Why: the step is not limited by matmul throughput on this device, so the "
            "conversions low precision adds cost more than its faster matmuls save."
        )
    if best.memory_vs_fp32 is not None and best.memory_vs_fp32 <= 0.8:
        why += " It still saves memory, which matters if fp32 does not fit."
    return Verdict(False, head + why + loss_note, best.name)


def _undecided(sampling: Sampling | None) -> str:
    """What was measured and what would decide an inconclusive verdict."""
    if sampling is None or sampling.stopped == "fixed":
        return (
            "Run again with a time budget (--budget SECONDS) so rounds are added until it is "
            "decided, or on a quieter machine."
        )
    measured = f"Measured {sampling.rounds} rounds in {sampling.seconds:.0f} s"
    if sampling.budget_s is not None:
        measured += f" (budget {sampling.budget_s:.0f} s)"
    if sampling.more_rounds is None or sampling.more_seconds is None:
        return (
            measured + "; the median sits at the threshold, so more rounds are not expected "
            "to decide it: the precisions are about equally fast here."
        )
    need = sampling.seconds + sampling.more_seconds
    return (
        measured + f"; about {sampling.more_rounds} more rounds (~{sampling.more_seconds:.0f} s "
        f"more at this rate) would decide it: rerun with --budget {math.ceil(need / 10) * 10}."
    )


@dataclass(kw_only=True)
class BenchReport:
    """Everything one ``ampkit bench`` run measured.

    Attributes:
        model: the ``--model`` value; ``description`` its shape.
        unit: what throughput counts (``tokens`` or ``samples``).
        device, device_name: where it ran.
        torch_version, python_version, threads: the software and CPU threads.
        steps, warmup: timed rounds and untimed warm-up rounds per variant.
        rounds_kept: timed rounds kept after dropping those where the probe moved.
        noisy: fewer than half the rounds (or than 3) ran on a steady machine: the figures
            are rough (from every round when fewer than 3 were kept), and the report says so
            first.
        probe_tolerance: the relative probe movement that drops a round.
        probe_spread: max/min probe time over the run (1.0 is a perfectly steady machine).
        memory_kind: what ``memory_bytes`` measures on this device.
        peak_rss_bytes: the process's peak RSS (CPU; covers every variant together).
        flops_per_step: model FLOPs of one training step (None when unknown).
        matmul_share: see :func:`decide_verdict`; None when the run was noisy (a reason is
            never derived from timings the noise check rejected).
        variants: per-variant results, in the order run.
        verdict: the plain-language answer.
        notes: warnings met while setting up (e.g. fp16 on a CPU is emulated).
        noisy: see above.
        clock: what step times measure and the verdict is judged by: ``"cpu"`` (the timing
            thread's CPU time, torch on one thread; a CPU device's default, because a busy
            neighbour does not inflate it) or ``"wall"`` (wall time; accelerators).
        sampling: how many rounds were timed and why it stopped (adaptive sampling).
    """

    model: str
    description: str
    unit: str
    device: str
    device_name: str
    torch_version: str
    python_version: str
    threads: int
    steps: int
    warmup: int
    rounds_kept: int
    probe_tolerance: float
    probe_spread: float
    memory_kind: str
    peak_rss_bytes: int | None
    flops_per_step: float | None
    matmul_share: float | None
    variants: list[VariantResult]
    verdict: Verdict
    notes: list[str] = field(default_factory=list)
    noisy: bool = False
    clock: str = "wall"
    sampling: Sampling | None = None

    def variant(self, name: str) -> VariantResult:
        """The result named ``name``.

        Raises:
            KeyError: no such variant.
        """
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: plain values; non-finite numbers become null."""
        data = asdict(self)
        data = {"schema": SCHEMA, **data}
        clean: dict[str, Any] = json_safe(data)
        return clean

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` to ``path`` as indented JSON."""
        atomic_write(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def _repr_html_(self) -> str:
        """The terminal table and verdict, inline in a notebook (monospaced, as printed)."""
        import html

        return f"<pre>{html.escape(self.render())}</pre>"

    def render(self) -> str:
        """The terminal table, the header lines and the verdict."""
        cuda = self.device.startswith("cuda")
        cpu_clock = self.clock == "cpu"
        header = [
            "variant",
            "cpu ms" if cpu_clock else "step ms",
            *(["wall ms"] if cpu_clock else []),
            f"{self.unit}/s",
            "vs fp32",
            _memory_header(cuda),
            "loss",
            "gap",
        ]
        if cuda:
            header.append("MFU")
        rows = [header]
        for v in self.variants:
            row = [
                v.name,
                f"{1000 * v.median_step_s:.1f}",
                *(
                    ["-" if v.wall_median_step_s is None else f"{1000 * v.wall_median_step_s:.1f}"]
                    if cpu_clock
                    else []
                ),
                f"{v.throughput:,.0f}",
                _speedup(v, self.noisy),
                _mib(v.memory_bytes),
                f"{v.final_loss:.4f}",
                "-" if v.loss_gap_vs_fp32 is None else f"{v.loss_gap_vs_fp32:+.4f}",
            ]
            if cuda:
                row.append("-" if v.mfu is None else f"{v.mfu:.1%}")
            rows.append(row)
        lines = []
        if self.noisy:
            lines += [
                f"NOISY: only {self.rounds_kept} of {self.steps} rounds ran on a steady machine "
                f"(probe spread {self.probe_spread:.2f}x); the figures below are rough.",
                "",
            ]
        lines += [
            f"model   {self.description}",
            f"device  {self.device_name} ({self.device}), torch {self.torch_version}, "
            f"{self.threads} thread{'s' if self.threads != 1 else ''}",
            f"timing  {self.steps} interleaved steps per variant after {self.warmup} warm-up; "
            f"{self.rounds_kept}/{self.steps} rounds kept (probe tolerance "
            f"{self.probe_tolerance:.0%}, probe spread {self.probe_spread:.2f}x)",
            *([f"rounds  {_sampling_line(self.sampling)}"] if self.sampling else []),
            "clock   "
            + (
                "judged by the timing thread's CPU time, torch on 1 thread (a busy machine "
                "inflates wall time, not CPU time); wall ms shown beside it"
                if cpu_clock
                else "judged by wall time"
            ),
            "",
        ]
        lines += text_table(rows, right=range(1, len(header)))
        lines.append("")
        lines.append(f"memory: {self.memory_kind}")
        if self.peak_rss_bytes is not None:
            lines.append(
                f"        process peak RSS {_mib(self.peak_rss_bytes)} (all variants together)"
            )
        lines.append(
            "vs fp32: median over rounds of fp32 step time / variant step time; in parentheses "
            + ("its quartiles (the run is noisy)" if self.noisy else "its 95% confidence interval")
        )
        lines.extend(f"note: {n}" for n in self.notes)
        lines.append("")
        lines.append(("NOISY: " if self.noisy else "") + self.verdict.text)
        return "\n".join(lines)


def _speedup(v: VariantResult, spread: bool) -> str:
    """The "vs fp32" cell and, for a low precision, the confidence interval of the speed-up
    against its fp32 twin (with ``spread``: the quartiles of the per-round ratios)."""
    if v.speedup_vs_fp32 is None:
        return "-"
    cell = f"{v.speedup_vs_fp32:.2f}x"
    bounds = v.speedup_vs_fp32_twin_iqr if spread else v.speedup_vs_fp32_twin_ci
    if bounds is not None and v.precision != "fp32":
        cell += f" ({bounds[0]:.2f}-{bounds[1]:.2f})"
    return cell


def _sampling_line(sampling: Sampling) -> str:
    """How many rounds were timed, and why the benchmark stopped there."""
    done = f"{sampling.rounds} timed in {sampling.seconds:.0f} s"
    if sampling.stopped == "fixed":
        return f"{done}, a fixed number (--budget 0)"
    budget = f"{sampling.budget_s:.0f} s" if sampling.budget_s is not None else "no"
    if sampling.stopped == "decided":
        return (
            f"{done} (at least {sampling.min_rounds}, budget {budget}): stopped when the "
            f"{sampling.confidence:.0%} interval of the speed-up left the {PAYS_OFF_SPEEDUP:.2f}x "
            "threshold"
        )
    if sampling.stopped == "budget":
        return (
            f"{done}: the {budget} budget ran out before the {sampling.confidence:.0%} interval "
            f"of the speed-up left the {PAYS_OFF_SPEEDUP:.2f}x threshold"
        )
    return f"{done} ({sampling.stopped})"


def _memory_header(cuda: bool) -> str:
    return "peak mem" if cuda else "saved for bwd"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"


def save_plot(report: BenchReport, path: str | Path) -> None:
    """Draw step time and memory per variant, and the loss curves, into a PNG.

    Uses matplotlib's object API (no pyplot), so no global backend or figure state changes.

    Raises:
        MissingDependencyError: matplotlib is not installed (``pip install 'ampkit[bench]'``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependencyError(
            "--plot: drawing the plot needs matplotlib, which is not installed. "
            "Install it with: pip install 'ampkit[bench]'"
        ) from exc
    names = [v.name for v in report.variants]
    fig = Figure(figsize=(13, 4), layout="constrained")
    ax_time, ax_mem, ax_loss = fig.subplots(1, 3)
    medians = [1000 * v.median_step_s for v in report.variants]
    whiskers = [
        [
            m - 1000 * (v.step_s_iqr or (v.median_step_s,) * 2)[0]
            for m, v in zip(medians, report.variants, strict=True)
        ],
        [
            1000 * (v.step_s_iqr or (v.median_step_s,) * 2)[1] - m
            for m, v in zip(medians, report.variants, strict=True)
        ],
    ]
    ax_time.bar(names, medians, yerr=whiskers, capsize=4, color="tab:blue")
    ax_time.set_ylabel(f"median step time, {report.clock} clock (ms)")
    ax_time.set_title("step time (whiskers: quartiles over rounds)")
    mem = [(v.memory_bytes or 0) / 2**20 for v in report.variants]
    ax_mem.bar(names, mem, color="tab:orange")
    ax_mem.set_ylabel("MiB")
    ax_mem.set_title(report.memory_kind, fontsize=8)
    for ax in (ax_time, ax_mem):
        ax.tick_params(axis="x", labelrotation=30)
    for v in report.variants:
        ax_loss.plot(range(1, len(v.losses) + 1), v.losses, label=v.name)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("training loss")
    ax_loss.set_title("loss (same batches for every variant)")
    ax_loss.legend(fontsize=8)
    fig.suptitle(f"ampkit bench: {report.description} on {report.device_name}", fontsize=9)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110))

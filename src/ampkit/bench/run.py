"""``run_bench``: time, measure and compare precisions on one model, interleaved.

Per variant (a precision, optionally compiled and/or channels-last): a deep copy of the same
initial weights, its own optimizer and :class:`~ampkit.MixedPrecision` engine, trained on the
same batches. Rounds run one step of every variant (:mod:`ampkit.bench.timing`); memory is
measured on the last warm-up step (:mod:`ampkit.bench.memory`), so timed steps carry no hooks.
"""

from __future__ import annotations

import contextlib
import copy
import math
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ampkit._tree import iter_tensors, to_device
from ampkit._validate import is_int, is_number
from ampkit.bench.flops import count_train_flops, mfu, peak_flops
from ampkit.bench.memory import cuda_step_peak_bytes, saved_tensor_bytes, state_bytes
from ampkit.bench.report import PAYS_OFF_SPEEDUP, BenchReport, VariantResult, decide_verdict
from ampkit.bench.sampling import (
    Sampling,
    decided,
    median_interval,
    min_rounds_for,
    rounds_to_decide,
)
from ampkit.bench.timing import (
    MIN_ROUNDS,
    Timings,
    cpu_clock_session,
    matmul_probe,
    run_interleaved,
)
from ampkit.bench.workloads import Workload, load_workload
from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.models.built import BuiltModel
from ampkit.precision import devices
from ampkit.precision.devices import peak_memory
from ampkit.precision.engine import MixedPrecision
from ampkit.precision.hardware import HardwareInfo
from ampkit.precision.hardware import probe as probe_hardware
from ampkit.precision.modes import TrainingSetup
from ampkit.precision.policy import Policy, parse_precision, resolve_device, resolve_precision

__all__ = ["default_precisions", "run_bench"]

_PROBE_SIZE = 256
_PROBE_REPEATS = 8


def default_precisions(hardware: HardwareInfo) -> list[str]:
    """fp32 plus the precision ``auto`` picks on ``hardware``.

    Where ``auto`` picks fp32 (no fast low precision), the low precision a user would try
    (bf16, or fp16 on a GPU without bf16) is measured too, so the verdict rests on a
    measurement rather than on the hardware table.
    """
    chosen = resolve_precision("auto", hardware=hardware).precision
    if chosen != "fp32":
        return ["fp32", chosen]
    if hardware.cuda_capability is not None and not hardware.cuda_bf16:
        return ["fp32", "fp16"]
    return ["fp32", "bf16"]


def _resolve_all(precisions: Sequence[str], device: torch.device) -> tuple[list[Policy], list[str]]:
    """Policies for ``precisions`` (fp32 first, duplicates dropped) and the warnings met."""
    notes: list[str] = []
    policies: dict[str, Policy] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PrecisionWarning)
        for spelled in ["fp32", *precisions]:
            try:
                policy = resolve_precision(spelled, device)
            except ConfigurationError as exc:
                message = str(exc).removeprefix("precision: ")
                raise type(exc)(f"--precisions: {message}") from exc
            policies.setdefault(policy.precision, policy)
    for warning in caught:
        if issubclass(warning.category, PrecisionWarning):
            notes.append(str(warning.message))
    if "fp32" not in [parse_precision(p).precision for p in precisions]:
        notes.append("fp32 was added as the baseline every speed-up is measured against.")
    return list(policies.values()), notes


def _validate(
    steps: int, warmup: int, batch_size: int | None, tolerance: float, budget: float | None
) -> None:
    problems = [
        f"--{flag} must be {rule}, got {value!r}"
        for flag, value, ok, rule in [
            (
                "budget",
                budget,
                budget is None or is_number(budget, 0),
                "a number of seconds >= 0 (0: exactly --steps rounds)",
            ),
            (
                "steps",
                steps,
                is_int(steps, MIN_ROUNDS),
                f"an integer >= {MIN_ROUNDS} (a spread needs {MIN_ROUNDS} rounds)",
            ),
            (
                "warmup",
                warmup,
                is_int(warmup, 1),
                "an integer >= 1 (the last warm-up step measures memory)",
            ),
            (
                "batch-size",
                batch_size,
                batch_size is None or is_int(batch_size, 1),
                "an integer >= 1",
            ),
            (
                "probe-tolerance",
                tolerance,
                is_number(tolerance, 0, open_low=True),
                "a positive number",
            ),
        ]
        if not ok
    ]
    if problems:
        raise ConfigurationError("invalid settings: " + "; ".join(problems) + ".")


@dataclass
class _Variant:
    name: str
    policy: Policy
    compiled: bool
    channels_last: bool
    model: torch.nn.Module
    forward: torch.nn.Module | Callable[..., object]
    optimizer: torch.optim.Optimizer
    engine: MixedPrecision
    losses: list[torch.Tensor]
    memory_bytes: int | None = None
    notes: list[str] = field(default_factory=list)


def _variant_specs(
    policies: list[Policy], compiled: bool, channels_last: bool
) -> list[tuple[str, Policy, bool, bool]]:
    specs = []
    for policy in policies:
        for c in (False, True) if compiled else (False,):
            for cl in (False, True) if channels_last else (False,):
                name = (
                    policy.precision + ("+compile" if c else "") + ("+channels_last" if cl else "")
                )
                specs.append((name, policy, c, cl))
    return specs


def run_bench(
    model: str | BuiltModel | Workload = "gpt",
    precisions: Sequence[str] | None = None,
    *,
    device: torch.device | str | None = None,
    steps: int = 20,
    warmup: int = 3,
    batch_size: int | None = None,
    compile: bool = False,
    channels_last: bool = False,
    compile_backend: str = "inductor",
    max_grad_norm: float | None = 1.0,
    probe_tolerance: float = 0.25,
    burst_s: float | None = 20.0,
    rest_s: float = 5.0,
    seed: int = 0,
    on_round: Callable[[int, int], None] | None = None,
    probe: Callable[[], float] | None = None,
    clock: str = "auto",
    allow_large: bool = False,
    budget_s: float | None = None,
) -> BenchReport:
    """Benchmark ``model`` in each precision, interleaved step by step; return the report.

    Args:
        model: a ``--model`` string (``"gpt"``, ``"convnet"``, ``"hf:gpt2"``, ``"timm:resnet18"``,
            ``"package.module:factory"``; see :mod:`ampkit.models.resolve`), a
            :class:`~ampkit.models.built.BuiltModel` or its :class:`Workload`.
        precisions: precisions to compare (aliases and ``auto`` accepted); fp32 is always
            added as the baseline. None: :func:`default_precisions` for the device.
        device: ``cpu``, ``cuda``, ``cuda:N``; None picks CUDA when available.
        steps: timed steps per variant (one per round).
        warmup: untimed steps per variant first; the last one measures memory.
        batch_size: overrides the workload's batch size (built-ins and factories that take
            ``batch_size``).
        compile: also run every precision through ``torch.compile``.
        channels_last: also run every precision in channels-last memory format (4-D inputs).
        compile_backend: ``torch.compile`` backend (``inductor``; ``aot_eager`` for tests).
        max_grad_norm: gradient clipping in every variant (None: off).
        probe_tolerance: drop a round when the matmul probe next to it moved by more.
        burst_s, rest_s: rest ``rest_s`` seconds after every ``burst_s`` seconds of rounds.
        seed: seeds the variant order.
        on_round: ``on_round(done, total)`` after every round.
        probe: a drift probe returning seconds (default: a fixed CPU matmul, which also
            gives the CPU's matmul speed for the verdict; a custom probe does not).
        clock: what steps are timed and judged by. ``"cpu"``: the timing thread's CPU
            time with torch on one thread (:func:`~ampkit.bench.timing.cpu_clock_session`),
            which a busy machine does not inflate; ``"wall"``: wall time (torch's threads
            as they are); ``"auto"``: ``cpu`` on a CPU device, ``wall`` on an accelerator
            (whose work the host thread's CPU time does not see). Wall time is always
            recorded too.
        allow_large: build an ``hf:`` model whose options ask for more than the size limit of
            :mod:`ampkit.models.size` (``--allow-large``).
        budget_s: adaptive sampling: after ``steps`` rounds, add rounds until the verdict is
            decided (the 95% confidence interval of the best low precision's median speed-up
            over its fp32 twin lies wholly on one side of the 1.10x pay-off threshold) or the
            timed rounds have taken ``budget_s`` wall seconds; an undecided verdict then says
            how much longer would decide it. None or 0: exactly ``steps`` rounds. The CLI's
            ``--budget`` defaults to 60.

    Raises:
        ConfigurationError: invalid settings (``steps`` below 3 included), an unknown
            precision or model spec, ``channels_last`` for a model without 4-D inputs,
            ``clock="cpu"`` on an accelerator.
        UnsupportedPrecisionError: a precision the device cannot run (bf16 on pre-Ampere).
    """
    _validate(steps, warmup, batch_size, probe_tolerance, budget_s)
    if clock not in ("auto", "cpu", "wall"):
        raise ConfigurationError(f"clock: must be 'auto', 'cpu' or 'wall', got {clock!r}.")
    dev = resolve_device(device)
    accelerator = devices.is_accelerator(dev)
    if clock == "cpu" and accelerator:
        raise ConfigurationError(
            f"clock: 'cpu' times the host thread, which does not see work queued on {dev}; "
            "use 'wall' (or 'auto') on an accelerator."
        )
    clock_name = ("wall" if accelerator else "cpu") if clock == "auto" else clock
    hardware = probe_hardware(dev)
    requested = list(precisions) if precisions else default_precisions(hardware)
    policies, notes = _resolve_all(requested, dev)
    with torch.random.fork_rng(devices=[]):
        workload = load_workload(model, batch_size, allow_large=allow_large)
    first_inputs, _ = workload.batch(0)
    dims = sorted({t.dim() for t in iter_tensors(first_inputs)})
    if channels_last and 4 not in dims:
        raise ConfigurationError(
            f"--channels-last: the {workload.name} model's inputs have "
            f"{' or '.join(map(str, dims)) or 'no'} dimensions; channels-last applies to 4-D "
            "image inputs (N, C, H, W). Drop --channels-last or use a conv model."
        )
    flops = workload.flops_per_step
    if flops is None:
        counted = copy.deepcopy(workload.model)
        x, y = workload.batch(0)
        flops = count_train_flops(lambda: workload.loss(counted, x, y).backward())
        del counted
    variants = [
        _build_variant(workload, name, policy, c, cl, dev, max_grad_norm, compile_backend)
        for name, policy, c, cl in _variant_specs(policies, compile, channels_last)
    ]
    notes += [f"{v.name}: {note}" for v in variants for note in v.notes]
    by_name = {v.name: v for v in variants}
    cache: dict[tuple[int, bool], tuple[Any, Any]] = {}

    def batch_for(i: int, cl: bool) -> tuple[Any, Any]:
        key = (i, cl)
        if key not in cache:
            if all(k[0] != i for k in cache):  # a new step: drop the previous step's batches
                cache.clear()
            x, y = workload.batch(i)
            cache[key] = (to_device(x, dev, channels_last=cl), to_device(y, dev))
        return cache[key]

    def make_step(v: _Variant) -> Callable[[int], None]:
        def train_step(i: int) -> None:
            x, y = batch_for(i, v.channels_last)
            with v.engine:
                with v.engine.autocast():
                    loss = workload.loss(v.forward, x, y)  # type: ignore[arg-type]
                v.engine.backward(loss)
                v.engine.step(v.optimizer)
            v.losses.append(loss.detach())

        def step(i: int) -> None:
            if i != warmup - 1:
                train_step(i)
            elif devices.has_peak_memory_counter(dev):
                v.memory_bytes = cuda_step_peak_bytes(
                    lambda: train_step(i), dev, state_bytes(v.model, v.optimizer)
                )
            else:
                _, v.memory_bytes = saved_tensor_bytes(
                    lambda: train_step(i), exclude=list(v.model.parameters())
                )

        return step

    def prepare(name: str, i: int) -> None:  # untimed: batch to the device before the clock
        batch_for(i, by_name[name].channels_last)

    pairs = _twin_pairs(variants)
    adaptive = bool(budget_s) and bool(pairs)
    session = cpu_clock_session() if clock_name == "cpu" else contextlib.nullcontext()
    with session as cpu_clock:
        step_clock = cpu_clock if cpu_clock is not None else time.perf_counter
        threads = torch.get_num_threads()
        probe_fn = (
            probe
            if probe is not None
            else matmul_probe(_PROBE_SIZE, _PROBE_REPEATS, clock=step_clock)
        )
        timings = run_interleaved(
            {v.name: make_step(v) for v in variants},
            rounds=steps,
            warmup=warmup,
            probe=probe_fn,
            tolerance=probe_tolerance,
            sync=(lambda: devices.synchronize(dev)) if accelerator else None,
            prepare=prepare,
            burst_s=burst_s,
            rest_s=rest_s,
            seed=seed,
            on_round=on_round,
            clock=step_clock,
            clock_name=clock_name,
            until=(lambda t: _decided(t, pairs)) if adaptive else None,
            budget_s=budget_s if adaptive else None,
        )
    sampling = _sampling(timings, pairs, steps, budget_s if adaptive else None)
    return _report(
        workload,
        variants,
        timings,
        dev,
        hardware,
        flops,
        notes,
        steps,
        warmup,
        probe is None,
        threads,
        sampling,
    )


def _build_variant(
    workload: Workload,
    name: str,
    policy: Policy,
    compiled: bool,
    channels_last: bool,
    dev: torch.device,
    max_grad_norm: float | None,
    backend: str,
) -> _Variant:
    model = copy.deepcopy(workload.model).to(dev)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    engine = MixedPrecision(policy, max_grad_norm=max_grad_norm)

    def first_batch_loss() -> torch.Tensor:
        x, y = workload.batch(0)
        return workload.loss(model, x.to(dev), y.to(dev))

    # the mode prepares from the first batch (fp8: its plan, timed per layer on CUDA)
    notes = engine.mode.setup_training(TrainingSetup(model, closure=first_batch_loss))
    model = engine.prepare_model(model)
    forward: torch.nn.Module | Callable[..., object] = (
        torch.compile(model, backend=backend) if compiled else model
    )
    return _Variant(
        name=name,
        policy=policy,
        compiled=compiled,
        channels_last=channels_last,
        model=model,
        forward=forward,
        optimizer=engine.prepare_optimizer(workload.make_optimizer(model)),
        engine=engine,
        losses=[],
        notes=notes,
    )


def _twin_pairs(variants: list[_Variant]) -> list[tuple[str, str]]:
    """(low-precision variant, its fp32 twin) for every variant the verdict compares."""
    return [
        (v.name, t.name)
        for v in variants
        if v.policy.precision != "fp32"
        for t in variants
        if t.policy.precision == "fp32"
        and (t.compiled, t.channels_last) == (v.compiled, v.channels_last)
    ]


def _speedups(timings: Timings, name: str, twin: str) -> list[float]:
    """Per-round speed-ups ``t_twin / t_name`` over the rounds the statistics use."""
    return [timings.times[twin][k] / timings.times[name][k] for k in timings.used]


def _best(timings: Timings, pairs: list[tuple[str, str]]) -> list[float]:
    """The per-round speed-ups of the fastest low precision (by median), as the verdict
    picks it."""
    return max((_speedups(timings, name, twin) for name, twin in pairs), key=statistics.median)


def _decided(timings: Timings, pairs: list[tuple[str, str]]) -> bool:
    """The stopping rule: the verdict would not be inconclusive, at full confidence."""
    speedups = _best(timings, pairs)
    return len(speedups) >= min_rounds_for() and decided(
        median_interval(speedups), PAYS_OFF_SPEEDUP
    )


def _sampling(
    timings: Timings, pairs: list[tuple[str, str]], steps: int, budget_s: float | None
) -> Sampling:
    """How the rounds were sampled, and for an undecided verdict how much more would do."""

    def made(stopped: str, more: int | None = None) -> Sampling:
        return Sampling(
            min_rounds=steps,
            rounds=timings.rounds,
            seconds=timings.seconds,
            budget_s=budget_s,
            stopped=stopped,
            more_rounds=more,
            more_seconds=None if more is None else more * timings.seconds / timings.rounds,
        )

    if not pairs:
        return made("nothing to decide")
    if budget_s is None:
        return made("fixed")
    if _decided(timings, pairs):
        return made("decided")
    speedups = _best(timings, pairs)
    needed = rounds_to_decide(speedups, PAYS_OFF_SPEEDUP)
    if needed is None:
        return made("budget")
    # dropped rounds count too: the used rounds still needed, times rounds run per round used
    return made("budget", math.ceil((needed - len(speedups)) * timings.rounds / len(speedups)))


def _inverse(quartiles: tuple[float, float]) -> tuple[float, float]:
    """Quartiles of ``t_v / t_twin`` as quartiles of the speed-up ``t_twin / t_v``."""
    return 1 / quartiles[1], 1 / quartiles[0]


def _report(
    workload: Workload,
    variants: list[_Variant],
    timings: Timings,
    dev: torch.device,
    hardware: HardwareInfo,
    flops: float | None,
    notes: list[str],
    steps: int,
    warmup: int,
    matmul_probe_used: bool,
    threads: int,
    sampling: Sampling,
) -> BenchReport:
    losses = {v.name: [float(t) for t in v.losses] for v in variants}
    base = next(v for v in variants if v.name == "fp32")
    base_median = timings.median("fp32")
    cuda = dev.type == "cuda"
    results = []
    for v in variants:
        twin = next(
            t
            for t in variants
            if t.policy.precision == "fp32"
            and (t.compiled, t.channels_last) == (v.compiled, v.channels_last)
        )
        median = timings.median(v.name)
        peak = peak_flops(hardware.name, v.policy.precision, v.policy.tf32) if cuda else None
        memory_ratio = (
            v.memory_bytes / twin.memory_bytes
            if v.memory_bytes is not None and twin.memory_bytes
            else None
        )
        final = losses[v.name][-1]
        results.append(
            VariantResult(
                name=v.name,
                precision=v.policy.precision,
                compiled=v.compiled,
                channels_last=v.channels_last,
                median_step_s=median,
                throughput=workload.items_per_step / median,
                speedup_vs_fp32=timings.ratio("fp32", v.name),
                speedup_vs_fp32_twin=timings.ratio(twin.name, v.name),
                speedup_vs_fp32_twin_iqr=_inverse(timings.ratio_quartiles(v.name, twin.name)),
                speedup_vs_fp32_twin_ci=median_interval(_speedups(timings, v.name, twin.name)),
                memory_bytes=v.memory_bytes,
                memory_vs_fp32=memory_ratio,
                losses=losses[v.name],
                final_loss=final,
                loss_gap_vs_fp32=final - losses[twin.name][-1],
                mfu=mfu(flops, median, peak),
                reason=v.policy.reason,
                step_s_iqr=timings.quartiles(v.name),
                wall_median_step_s=timings.wall_median(v.name),
            )
        )
    if cuda:
        matmul_rate = peak_flops(hardware.name, "fp32", base.policy.tf32)
        native: bool | None = (
            hardware.cuda_capability is not None and hardware.cuda_capability[0] >= 7
        )
    else:
        probe_median = statistics.median(timings.probes)
        matmul_rate = (
            2 * _PROBE_SIZE**3 * _PROBE_REPEATS / probe_median if matmul_probe_used else None
        )
        native = hardware.cpu_native_bf16
    share = None
    if flops is not None and matmul_rate and not timings.noisy:
        # never a reason from timings the noise check rejected
        share = min(1.0, flops / base_median / matmul_rate)
    rss = None if devices.is_accelerator(dev) else peak_memory(dev)[0]
    if timings.noisy:
        used = "all rounds" if len(timings.used) > len(timings.kept) else "the steady rounds"
        notes.append(
            f"only {len(timings.kept)} of {timings.rounds} rounds ran on a steady machine (the probe "
            f"moved in the others), so the figures come from {used} and are rough: read the "
            "spread (quartiles) with them, or rerun with more --steps on a quieter machine. "
            "No matmul share is derived from them."
        )
    return BenchReport(
        model=workload.name,
        description=workload.description or workload.name,
        unit=workload.unit,
        device=str(dev),
        device_name=hardware.name,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        threads=threads,
        steps=timings.rounds,
        warmup=warmup,
        rounds_kept=len(timings.kept),
        noisy=timings.noisy,
        probe_tolerance=timings.tolerance,
        probe_spread=max(timings.probes) / min(timings.probes),
        memory_kind=(
            "CUDA max_memory_allocated during one step, as if the variant were alone"
            if cuda
            else "bytes of activations saved for backward (saved-tensor hooks, parameters excluded)"
        ),
        peak_rss_bytes=rss,
        flops_per_step=flops,
        matmul_share=share,
        variants=results,
        verdict=decide_verdict(
            results,
            device_type=dev.type,
            device_name=hardware.name,
            native_low_precision=native,
            matmul_share=share,
            sampling=sampling,
        ),
        notes=notes,
        clock=timings.clock,
        sampling=sampling,
    )

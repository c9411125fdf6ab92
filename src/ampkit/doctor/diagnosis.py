"""``ampkit.diagnose``: which precision should this model use, and which layers break it.

::

    report = ampkit.diagnose(model, closure, precision="fp16", steps=3)
    print(report.to_text())
    report.findings          # [NumericsFinding(module="blocks.1.mlp.fc", kind="overflow", ...)]
    report.recommendation    # Recommendation(precision="bf16", keep_fp32=(), ...)

It runs ``steps`` fp32 steps (``closure()`` then ``loss.backward()``) with hooks on every module,
measures each module's activations and gradients against fp16, bf16 and fp8, re-runs each module
once under autocast in the candidate precision to measure its own error, and says where each
problem starts. The model is as before afterwards: parameters, gradients, buffers (BatchNorm
statistics), train/eval modes and the global RNG (unless you pass an ``optimizer``, which then
steps); key/value caches are off during the analysis (``config.use_cache = False``), so no
cache entry written in one precision is read in another.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from ampkit._validate import is_int, is_number
from ampkit.doctor.advice import runs_well, slow_here
from ampkit.doctor.compute import island_share
from ampkit.doctor.dtype_map import precision_map as run_precision_map
from ampkit.doctor.findings import Tolerances, evaluate, recommend, with_island_cost
from ampkit.doctor.hooks import observe
from ampkit.doctor.isolation import preserved_state
from ampkit.doctor.recorder import ModuleState, Recorder
from ampkit.doctor.report import NumericsReport
from ampkit.doctor.roles import roles_section
from ampkit.doctor.rows import MapRow, ModuleRow, NumericsFinding, PhaseRow
from ampkit.errors import ConfigurationError, UnsupportedPrecisionError
from ampkit.precision.float_formats import number_formats
from ampkit.precision.hardware import HardwareInfo
from ampkit.precision.hardware import probe as probe_hardware
from ampkit.precision.modes import DoctorSection, PrecisionMode, precision_mode
from ampkit.precision.policy import analysis_policy, parse_precision, resolve_precision
from ampkit.precision.stats import RangeStats, effective_loss_scale, format_limits

__all__ = ["diagnose"]


def _device_of(model: nn.Module) -> torch.device:
    for tensor in [*model.parameters(), *model.buffers()]:
        return tensor.device
    return torch.device("cpu")


def _mode(
    precision: str | PrecisionMode, device: torch.device, hardware: HardwareInfo | None
) -> PrecisionMode:
    """The mode to diagnose: ``auto`` is decided by the hardware, any other spelling names its
    mode without asking the hardware (the doctor also plans for other machines)."""
    if isinstance(precision, PrecisionMode):
        return precision
    if parse_precision(precision).precision == "auto":
        return precision_mode(resolve_precision(precision, device, hardware=hardware))
    return precision_mode(precision)


def _check_model(model: nn.Module) -> None:
    if not isinstance(model, nn.Module):
        raise ConfigurationError(
            f"diagnose: model is a {type(model).__name__}, not a torch.nn.Module. "
            "Pass the model whose forward the closure runs."
        )
    for name, param in model.named_parameters():
        if param.is_floating_point() and param.dtype != torch.float32:
            raise ConfigurationError(
                f"diagnose: parameter {name!r} is {param.dtype}, but the doctor measures an fp32 "
                "run. Pass the model in fp32 (mixed precision keeps fp32 weights; do not .half() "
                "or .bfloat16() it)."
            )


def _check_loss(loss: object, step: int) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        seen = (
            f"a tensor of shape {tuple(loss.shape)} and dtype {loss.dtype}"
            if isinstance(loss, torch.Tensor)
            else f"a {type(loss).__name__}"
        )
        raise ConfigurationError(
            f"diagnose: closure() returned {seen} at step {step}. It must run the forward pass "
            "and return the loss, a floating-point scalar tensor."
        )
    if not loss.requires_grad:
        raise ConfigurationError(
            f"diagnose: the loss closure() returned at step {step} does not require grad. "
            "Return the loss of the model's forward, not a detached value or one computed under "
            "torch.no_grad()."
        )
    return loss


def _loss_finding(step: int, value: float) -> NumericsFinding:
    """The fp32 loss is inf/NaN while no module turned finite values into inf/NaN."""
    return NumericsFinding(
        module="",
        kind="non-finite",
        phase="forward",
        precision="fp32",
        message=(
            f"(loss): the loss closure() returned is {value} in fp32 at step {step}, though no "
            "module turned finite values into inf/NaN: the inputs, the weights or the loss "
            "computation outside the modules (a log of 0, a division by 0) make it; no "
            "precision fixes this, fix the computation"
        ),
        numbers={"loss": value},
        module_type="loss",
        step=step,
        dtype="float32",
    )


def _phase_row(stats: RangeStats, fp16_scale: float) -> PhaseRow | None:
    if stats.count == 0:
        return None
    fits = {name: stats.fit(name, fp16_scale if name == "fp16" else 1.0) for name in stats.limits}
    return PhaseRow(
        count=stats.count,
        zeros=stats.zeros,
        nonfinite=stats.nonfinite,
        max_abs=stats.max_abs,
        min_abs=stats.min_abs,
        fits=fits,
        hist=tuple(stats.hist),
    )


def _row(state: ModuleState, scale: float) -> ModuleRow:
    rel = dict(state.rel_error)
    rel.update({fmt: float("nan") for fmt in state.replay_errors})
    return ModuleRow(
        name=state.name,
        type=state.type,
        calls=state.calls,
        forward=_phase_row(state.forward, 1.0),
        backward=_phase_row(state.backward, scale),
        rel_error=rel,
        pass_through=state.passes_through,
    )


def _note_fp32_outputs(
    findings: list[NumericsFinding], pmap: tuple[MapRow, ...]
) -> list[NumericsFinding]:
    """Say so where autocast keeps a flagged module's output in fp32: the range problem then
    shows up where a consumer casts the value down (fp16 islands cover those consumers)."""
    fp32 = {row.module for row in pmap if row.output == "float32"}
    noted = []
    for f in findings:
        if f.module in fp32 and f.kind in ("overflow", "underflow") and f.precision != "fp32":
            f = replace(
                f,
                message=f"{f.message} (autocast keeps this module's output in fp32: the "
                "values are cast down, and the problem appears, where a consumer runs in "
                f"{f.precision})",
                numbers={**f.numbers, "autocast_output_fp32": 1.0},
            )
        noted.append(f)
    return noted


def _quiet(stage: str, done: int, total: int) -> None:
    return None


def contract_section(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, autocast: torch.dtype
) -> DoctorSection:
    """``dtype_contract``: what ``model`` and ``optimizer`` (None: a plain optimizer over the
    model's parameters) train in under the candidate's autocast
    (:func:`~ampkit.precision.contract.dtype_contract`)."""
    from ampkit.precision.contract import dtype_contract

    contract = dtype_contract(
        optimizer, model=model, autocast=None if autocast == torch.float32 else autocast
    )
    return DoctorSection("dtype_contract", contract.to_text(), contract.to_dict())


def diagnose(
    model: nn.Module,
    closure: Callable[[], torch.Tensor],
    precision: str | PrecisionMode = "fp16",
    steps: int = 3,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    init_scale: float = 2.0**16,
    tolerances: Tolerances | None = None,
    with_precision_map: bool = True,
    hardware: HardwareInfo | None = None,
    lr: float = 2e-3,
    progress: Callable[[str, int, int], None] | None = None,
) -> NumericsReport:
    """Diagnose ``model`` for training in ``precision``.

    Args:
        model: an fp32 model.
        closure: runs the forward pass on a batch and returns the loss (like an optimizer
            closure); called once per step. Give it a new batch each call to cover more data.
        precision: the candidate: ``fp16``, ``bf16``, ``fp32``, ``bf16-true``, ``fp8``, an
            alias, ``auto``, or a precision mode object (:mod:`ampkit.precision.modes`). The
            numerics are measured in the mode's autocast format (bf16 for fp8 and bf16-true),
            and the mode adds its sections to the report (fp8: the per-layer plan,
            :func:`~ampkit.fp8_plan`; bf16-true: the lost-updates probe).
        steps: fp32 steps to measure.
        optimizer: if given, it steps after every backward (the weights change); otherwise
            parameters and gradients are left exactly as they were.
        init_scale: the fp16 loss scaler's initial scale; gradients are measured at the scale
            it backs off to for them.
        tolerances: when underflow and precision loss become findings.
        with_precision_map: also run once under the candidate's autocast and record the dtype
            of each module's output (:attr:`NumericsReport.precision_map`).
        hardware: plan for another machine (decides whether bf16 can be recommended).
        lr: learning rate of the mode's probes (bf16-true: AdamW in the lost-updates probe;
            the smaller, the more updates fall under half an ulp).
        progress: called as ``progress(stage, done, total)`` as the work goes: per measured
            step (``"fp32 steps"``), per module re-run on the first step (``"module
            re-runs"``), and once before and after each further pass over the model; ``done``
            is 0 when a stage starts and ``total`` when it ends. Nothing is printed.

    Returns:
        The report: per-module rows, findings, the recommendation.

    Raises:
        ConfigurationError: unknown precision, ``steps < 1``, ``init_scale`` not a power of
            two >= 1, a non-fp32 model, or a closure that does not return a scalar loss that
            requires grad.
    """
    _check_model(model)
    if not is_int(steps, 1):
        raise ConfigurationError(f"diagnose: steps={steps!r} is invalid. Use an integer >= 1.")
    if not (is_number(init_scale, 1) and math.frexp(init_scale)[0] == 0.5):
        raise ConfigurationError(
            f"diagnose: init_scale={init_scale!r} is invalid. Use a power of two >= 1, as loss "
            "scalers do (PyTorch's default is 65536)."
        )
    device = _device_of(model)
    mode = _mode(precision, device, hardware)
    candidate = mode.measured_as
    tol = tolerances or Tolerances()
    limits = format_limits()
    replay = {"fp32": [], "bf16": ["bf16"], "fp16": ["fp16", "bf16"]}[candidate]
    recorder = Recorder(model, limits, replay)
    report = progress or _quiet
    modules = len(recorder.states)
    if replay:
        recorder.on_module_rerun = lambda done: report(
            "module re-runs", min(done, modules), modules
        )
    params = list(model.parameters())
    pmap = None
    bad_loss: tuple[int, float] | None = None  # (step, value) of the first inf/NaN loss
    with preserved_state(model, device):
        try:
            for p in params:
                p.grad = None
            report("fp32 steps", 0, steps)
            with observe(model, recorder):
                for step in range(1, steps + 1):
                    recorder.step = step
                    with torch.autocast(device.type, enabled=False):
                        loss = _check_loss(closure(), step)
                    value = float(loss.detach())  # one sync per step: not a hot loop
                    if bad_loss is None and not math.isfinite(value):
                        bad_loss = (step, value)
                    loss.backward()
                    if optimizer is not None:
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                    else:
                        for p in params:
                            p.grad = None
                    if step == 1 and replay:
                        report("module re-runs", modules, modules)
                    report("fp32 steps", step, steps)
        finally:
            recorder.active = False
        if with_precision_map:
            report("precision map", 0, 1)
            pmap = run_precision_map(model, closure, analysis_policy(candidate, device))
            report("precision map", 1, 1)

    states = recorder.states
    grad_max = max((s.backward.max_abs for s in states.values()), default=0.0)
    fp16_scale = effective_loss_scale(grad_max, limits["fp16"], init_scale=init_scale)
    formats = {"fp16": [("fp16", fp16_scale), ("bf16", 1.0)], "bf16": [("bf16", 1.0)]}
    found: dict[str, list[NumericsFinding]] = {
        fmt: evaluate(states, fmt, limits[fmt], scale, tol)
        for fmt, scale in formats.get(candidate, [("bf16", 1.0)])
    }
    if candidate == "fp32":
        found = {"fp32": [f for f in found["bf16"] if f.precision == "fp32"]}
    if bad_loss is not None and not any(f.precision == "fp32" for f in found[candidate]):
        found = {fmt: [_loss_finding(*bad_loss), *fs] for fmt, fs in found.items()}
    order = {name: i for i, name in enumerate(states)}
    findings = sorted(  # inf/NaN the fp32 run itself made come first: nothing else matters yet
        found[candidate],
        key=lambda f: (
            f.precision != "fp32",
            order.get(f.module, -1),
            f.phase != "forward",
            f.kind,
        ),
    )
    parents = {n for n in states for m in states if m != n and (n == "" or m.startswith(n + "."))}
    input_overflow = [
        n
        for n, s in states.items()
        if n not in parents
        and not s.passes_through  # it runs in its input's dtype: autocast casts nothing for it
        and s.input_max >= limits["fp16"].overflow_at
    ]
    try:
        resolve_precision("bf16", device, hardware=hardware)
        bf16_runs = True
    except UnsupportedPrecisionError:
        bf16_runs = False
    auto = resolve_precision("auto", device, hardware=hardware)
    facts = hardware if hardware is not None else probe_hardware(device)
    recommendation = recommend(
        candidate,
        found,
        loss_scale=fp16_scale if candidate == "fp16" else None,
        bf16_runs=bf16_runs,
        input_overflow=input_overflow,
        hardware=f"auto picks {auto.precision} here: {auto.reason}",
        runs_well=runs_well(facts),
        slow=lambda precision: slow_here(precision, facts),
    )
    if recommendation.keep_fp32 and recommendation.precision is not None:
        report("fp32 islands' share of the compute", 0, 1)
        with preserved_state(model, device):
            share = island_share(model, closure, recommendation.keep_fp32)
        report("fp32 islands' share of the compute", 1, 1)
        in_recommended = found.get(recommendation.precision, found[candidate])
        recommendation = with_island_cost(
            recommendation,
            share,
            in_recommended,
            all_flagged=[f.module for f in in_recommended],
        )
    if pmap is not None:
        findings = _note_fp32_outputs(findings, pmap)
    used = {f.name: f.to_dict() for f in number_formats()}
    report("precision mode probes", 0, 1)
    compute = analysis_policy(candidate, device).compute_dtype
    roles = roles_section(model, closure, compute, device)
    sections = [
        *mode.doctor_sections(model, closure, steps=steps, lr=lr),
        *([roles] if roles is not None else []),
        contract_section(model, optimizer, compute),
    ]
    report("precision mode probes", 1, 1)
    return NumericsReport(
        precision=mode.name,
        measured_as=candidate,
        sections=tuple(sections),
        device=str(device),
        steps=steps,
        loss_scale=fp16_scale if candidate == "fp16" else None,
        rows=tuple(_row(s, fp16_scale) for s in states.values() if s.calls),
        findings=tuple(findings),
        recommendation=recommendation,
        precision_map=pmap,
        formats=used,
    )

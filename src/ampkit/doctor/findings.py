"""From measurements to findings (where a problem starts) and a recommendation.

A module is reported for a (kind, phase) only if none of its descendants is: a container is
named only when the problem is in its own code (an inline division, say), not in a child's.

* ``non-finite``: the fp32 run itself turned finite inputs into inf/NaN (forward), or a clean
  output gradient into inf/NaN gradients (backward). No precision fixes this.
* ``overflow``: the module's outputs overflow the format while its inputs fit (forward), or,
  at the loss scale dynamic scaling settles on, the gradients it produces overflow while the
  gradient it receives fits (backward).
* ``underflow``: more than ``Tolerances.underflow`` of the non-zero values become zero or
  subnormal in the format (gradients: at that loss scale).
* ``precision-loss``: re-run in the format, the module's output is off by more than
  ``Tolerances.precision_loss`` (relative L2 error), with no overflow or inf/NaN to explain it.

A pass-through module (Identity, Dropout, DropPath, Flatten, or one that kept its inputs'
range on every call, :mod:`ampkit.doctor.passthrough`) has no findings of its own: what is seen
at it is moved to the module that made the values it forwarded (``NumericsFinding.through``
names it), unless that module has the same finding already.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ampkit.doctor.compute import IslandShare
from ampkit.doctor.passthrough import producer
from ampkit.doctor.recorder import ModuleState
from ampkit.doctor.rows import Alternative, NumericsFinding, Recommendation
from ampkit.precision.stats import FormatLimits

__all__ = ["MOSTLY_FP32", "Tolerances", "evaluate", "recommend", "with_island_cost"]

MOSTLY_FP32 = 0.5
"""Above this share of the compute in fp32, a recommendation says so and offers alternatives."""


@dataclass(frozen=True)
class Tolerances:
    """When a measurement becomes a finding.

    Attributes:
        underflow: fraction of non-zero values that may become zero or subnormal.
        precision_loss: relative L2 error of a module's output in the low precision.
    """

    underflow: float = 0.05
    precision_loss: float = 0.05


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def _candidates(
    state: ModuleState, fmt: str, lim: FormatLimits, scale: float, tol: Tolerances
) -> list[NumericsFinding]:
    name, found = state.name, []

    def add(kind: str, phase: str, precision: str, message: str, **numbers: float) -> None:
        found.append(
            NumericsFinding(
                module=name,
                kind=kind,  # type: ignore[arg-type]
                phase=phase,  # type: ignore[arg-type]
                precision=precision,
                message=f"{name or '(model)'} ({state.type}): {message}",
                numbers=numbers,
                module_type=state.type,
            )
        )

    if state.nonfinite_origin is not None:
        step, ranges, dtype = state.nonfinite_origin
        shown = ", ".join(f"[{lo:.3g}, {hi:.3g}]" for lo, hi in ranges) or "none"
        found.append(
            NumericsFinding(
                module=name,
                kind="non-finite",
                phase="forward",
                precision="fp32",
                message=(
                    f"{name or '(model)'} ({state.type}): forward made inf/NaN in fp32 itself "
                    f"at step {step} from finite inputs (ranges {shown}); no precision fixes "
                    "this, fix the computation"
                ),
                numbers={"nonfinite_values": float(state.forward.nonfinite)},
                module_type=state.type,
                step=step,
                dtype=dtype,
                input_ranges=ranges,
            )
        )
    made_bad = [r for r in state.records if r.made_grad_nonfinite and not r.out_grad_nonfinite]
    if made_bad and state.forward.nonfinite == 0:  # else inf/NaN gradients follow from forward
        add(
            "non-finite",
            "backward",
            "fp32",
            f"backward made inf/NaN gradients in fp32 itself at step {made_bad[0].step} from a "
            "finite output gradient; no precision fixes this, fix the computation",
            step=float(made_bad[0].step),
        )
    fwd = state.forward.fit(fmt) if state.forward.count else None
    if fmt in state.overflow_origin and fwd is not None:
        step, in_max, out_max = state.overflow_origin[fmt]
        add(
            "overflow",
            "forward",
            fmt,
            f"activations overflow {fmt}: largest {out_max:.3g} >= {lim.overflow_at:g} "
            f"({_pct(fwd.overflow)} of values) while its inputs fit (largest {in_max:.3g})",
            max_abs=out_max,
            input_max=in_max,
            overflow_fraction=fwd.overflow,
            limit=lim.max,
            step=float(step),
        )
    if fwd is not None and fwd.lost > tol.underflow:
        add(
            "underflow",
            "forward",
            fmt,
            f"{_pct(fwd.lost)} of non-zero activations become subnormal "
            f"({_pct(fwd.subnormal)}) or zero ({_pct(fwd.underflow)}) in {fmt}; "
            f"smallest {state.forward.min_abs:.3g}, smallest normal {lim.smallest_normal:.3g}",
            underflow_fraction=fwd.underflow,
            subnormal_fraction=fwd.subnormal,
            min_abs=state.forward.min_abs,
            max_abs=state.forward.max_abs,
        )
    bwd = state.backward.fit(fmt, scale) if state.backward.count else None
    over = [
        r
        for r in state.records
        if not r.out_grad_nonfinite
        and not r.made_grad_nonfinite
        and r.out_grad_max * scale < lim.overflow_at <= r.made_grad_max * scale
    ]
    if over and bwd is not None:
        add(
            "overflow",
            "backward",
            fmt,
            f"gradients overflow {fmt} at loss scale {scale:g}: largest "
            f"{over[0].made_grad_max:.3g} x {scale:g} >= {lim.overflow_at:g} while the gradient "
            f"it receives fits (largest {over[0].out_grad_max:.3g})",
            max_abs=over[0].made_grad_max,
            loss_scale=scale,
            limit=lim.max,
            overflow_fraction=bwd.overflow,
        )
    if bwd is not None and bwd.lost > tol.underflow:
        add(
            "underflow",
            "backward",
            fmt,
            f"at loss scale {scale:g}, {_pct(bwd.lost)} of non-zero gradients become "
            f"subnormal ({_pct(bwd.subnormal)}) or zero ({_pct(bwd.underflow)}) in {fmt}; "
            f"largest gradient {state.backward.max_abs:.3g}",
            underflow_fraction=bwd.underflow,
            subnormal_fraction=bwd.subnormal,
            max_abs=state.backward.max_abs,
            loss_scale=scale,
        )
    error = state.rel_error.get(fmt)
    if error is not None and error > tol.precision_loss:
        add(
            "precision-loss",
            "forward",
            fmt,
            f"its output run in {fmt} differs from fp32 by {_pct(error)} (relative L2 error, "
            f"from the same inputs; tolerance {_pct(tol.precision_loss)})",
            rel_error=error,
            tolerance=tol.precision_loss,
        )
    return found


def _descendant(child: str, parent: str) -> bool:
    return child != parent and (parent == "" or child.startswith(parent + "."))


def _moved(
    finding: NumericsFinding, state: ModuleState, states: Mapping[str, ModuleState]
) -> NumericsFinding:
    """``finding``, seen at pass-through module ``state``, told of the module that made the
    values it forwarded."""
    target = producer(state.name, states)
    kind = states[target].type if target in states else ""
    text = finding.message.removeprefix(f"{state.name} ({state.type}): ")
    source = f"{target}'s values" if target else "the model's inputs or its own code's values"
    return replace(
        finding,
        module=target,
        module_type=kind,
        message=(
            f"{target or '(model)'} ({kind}): {text} (measured at {state.name} ({state.type}), "
            f"a pass-through module that forwards {source})"
        ),
        through=state.name,
    )


def evaluate(
    states: Mapping[str, ModuleState],
    fmt: str,
    lim: FormatLimits,
    scale: float,
    tol: Tolerances,
) -> list[NumericsFinding]:
    """Findings for format ``fmt`` (gradients at loss ``scale``), each where it starts."""
    own = [
        f
        for s in states.values()
        if not s.passes_through
        for f in _candidates(s, fmt, lim, scale, tol)
    ]
    owned = {(f.module, f.kind, f.phase) for f in own}
    moved: dict[tuple[str, str, str], NumericsFinding] = {}
    for s in states.values():
        if s.passes_through:
            for f in _candidates(s, fmt, lim, scale, tol):
                f = _moved(f, s, states)
                key = (f.module, f.kind, f.phase)
                if key not in owned:
                    moved.setdefault(key, f)
    raw = [*own, *moved.values()]
    keys = {(f.module, f.kind, f.phase) for f in raw}
    forward_named = {f.module for f in raw if f.phase == "forward"}
    explained = {f.module for f in raw if f.kind in ("overflow", "non-finite")}
    kept = []
    for f in raw:
        if any(_descendant(m, f.module) for m, k, p in keys if (k, p) == (f.kind, f.phase)):
            continue
        if f.kind == "precision-loss" and (
            f.module in explained or any(_descendant(m, f.module) for m in forward_named)
        ):
            continue
        kept.append(f)
    return kept


def recommend(
    candidate: str,
    findings: Mapping[str, Sequence[NumericsFinding]],
    *,
    loss_scale: float | None,
    bf16_runs: bool,
    input_overflow: Sequence[str] = (),
    hardware: str = "",
    runs_well: Sequence[str] | None = None,
    slow: Callable[[str], str] | None = None,
) -> Recommendation:
    """What to train in, given the findings per format and what the device runs well.

    Nothing (``precision=None``) while the fp32 run itself makes inf/NaN: no precision fixes
    that, and what comes after the inf/NaN could not be measured. A precision the numerics
    allow but the device does not run well (fp16 on a CPU, any low precision on a CPU without
    native bf16) is not advised: bf16 takes its place where the device runs bf16 well and its
    numerics were measured (with its own ``keep_fp32``), fp32 otherwise, and the reasons say
    both what the numerics allow and why it is slow here.

    Args:
        candidate: the precision that was diagnosed (``fp16``, ``bf16`` or ``fp32``).
        findings: ``{format: findings}`` for the candidate and, for fp16, for bf16.
        loss_scale: the fp16 loss scale the gradients were measured at.
        bf16_runs: whether this device can run bf16 at all.
        input_overflow: leaf modules whose inputs overflow fp16: fp16 islands need them too,
            or autocast would cast their fp32 inputs back down to inf.
        hardware: ``resolve_precision("auto")``'s description for this machine.
        runs_well: the precisions the device computes fast
            (:func:`ampkit.doctor.advice.runs_well`); None: advise by the numerics alone.
        slow: ``slow(precision)``, why a precision is not advised here (one clause).
    """
    rec = _by_numerics(
        candidate,
        findings,
        loss_scale=loss_scale,
        bf16_runs=bf16_runs,
        input_overflow=input_overflow,
        hardware=hardware,
    )
    if runs_well is None or rec.precision is None or rec.precision in runs_well:
        return rec
    why_slow = slow(rec.precision) if slow is not None else f"{rec.precision} is slow here"
    if rec.precision == "fp16" and "bf16" in runs_well and "bf16" in findings:
        keep = _outermost([f.module for f in findings["bf16"] if f.precision != "fp32"])
        why = f"but {why_slow}; this device runs bf16 well, so bf16" + (
            f", with {', '.join(keep)} in fp32 where bf16 loses too much precision"
            if keep
            else ", which is clean here too"
        )
        return Recommendation("bf16", None, keep, (*rec.reasons, why), hardware)
    why = f"but {why_slow}; train in fp32"
    return Recommendation("fp32", None, (), (*rec.reasons, why), hardware)


def _outermost(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` without duplicates and without those inside another one of them."""
    unique = list(dict.fromkeys(names))
    return tuple(n for n in unique if not any(_descendant(n, m) for m in unique))


def _by_numerics(
    candidate: str,
    findings: Mapping[str, Sequence[NumericsFinding]],
    *,
    loss_scale: float | None,
    bf16_runs: bool,
    input_overflow: Sequence[str],
    hardware: str,
) -> Recommendation:
    """The lowest precision the numbers allow, whatever the device runs fast."""
    broken = [f for fs in findings.values() for f in fs if f.precision == "fp32"]
    if broken:
        names = sorted(
            {f.module or ("(loss)" if f.module_type == "loss" else "(model)") for f in broken}
        )
        return Recommendation(
            None,
            None,
            (),
            (
                f"inf/NaN already in fp32 at {', '.join(names)}: no precision setting fixes "
                "this; fix the computation first (see the non-finite findings), then run the "
                "doctor again for a recommendation",
            ),
            hardware,
        )

    def problems(fmt: str) -> list[NumericsFinding]:
        return [f for f in findings.get(fmt, ()) if f.precision != "fp32"]

    def modules(found: Sequence[NumericsFinding], extra: Sequence[str] = ()) -> tuple[str, ...]:
        return _outermost([*(f.module for f in found), *extra])

    if candidate == "fp32":
        return Recommendation(
            "fp32", None, (), ("fp32 was diagnosed; nothing to change",), hardware
        )
    if candidate == "bf16":
        bad = problems("bf16")
        keep = modules(bad)
        why = (
            f"bf16 loses too much in {', '.join(keep)}: run them in fp32"
            if keep
            else "bf16 is clean for this model: no overflow, underflow or precision loss found"
        )
        return Recommendation("bf16", None, keep, (why,), hardware)
    bad16 = problems("fp16")
    if not bad16:
        clean = f"fp16 is clean for this model at loss scale {loss_scale:g}"
        return Recommendation("fp16", loss_scale, (), (clean,), hardware)
    where = ", ".join(sorted({f"{f.module} ({f.kind}, {f.phase})" for f in bad16}))
    if all(f.kind == "precision-loss" for f in bad16):
        keep = modules(bad16)
        why = f"fp16 keeps its range here but loses too much precision in {where}: run them in fp32"
        return Recommendation("fp16", loss_scale, keep, (why,), hardware)
    if bf16_runs:
        keep = modules(problems("bf16"))
        why = (
            f"fp16 fails in {where}; bf16 has fp32's exponent range, so it does not overflow "
            "or underflow there"
        )
        if keep:
            why += f", but loses too much precision in {', '.join(keep)}: run them in fp32"
        return Recommendation("bf16", None, keep, (why,), hardware)
    keep = modules(bad16, [m for m in input_overflow])
    why = f"fp16 fails in {where} and this device has no bf16: run them in fp32"
    return Recommendation("fp16", loss_scale, keep, (why,), hardware)


def _accumulated(
    island: str, findings: Sequence[NumericsFinding], names: Sequence[str]
) -> float | None:
    """The error of ``island`` when its only finding is precision loss and no module inside it
    has a finding: the error built up over its children, none of them above the tolerance."""
    own = [f for f in findings if f.module == island]
    if not own or any(f.kind != "precision-loss" for f in own):
        return None
    if any(_descendant(n, island) for n in names):
        return None
    return max(f.numbers.get("rel_error", 0.0) for f in own)


def with_island_cost(
    rec: Recommendation,
    share: IslandShare,
    findings: Sequence[NumericsFinding],
    *,
    all_flagged: Sequence[str] = (),
    threshold: float = MOSTLY_FP32,
) -> Recommendation:
    """``rec`` with the share of the compute its ``keep_fp32`` holds; above ``threshold`` the
    reasons say so plainly and the alternatives are offered (fp32; the recommendation and its
    cost; without islands, with the measured error, where only precision loss was found).

    Args:
        rec: a recommendation with ``keep_fp32``.
        share: the measured share of its islands (:func:`~ampkit.doctor.compute.island_share`).
        findings: the findings in the recommended precision (the errors quoted).
        all_flagged: every module with a finding in that precision (to tell an island
            flagged for its own error from one flagged for its children's accumulated error).
        threshold: the share above which the recommendation is "mostly fp32".
    """
    compute, params = share.share, share.params_share
    rec = replace(rec, fp32_compute=compute, fp32_params=params)
    if compute <= threshold or rec.precision in (None, "fp32"):
        return rec
    keep = list(rec.keep_fp32)
    counted = "matmul/convolution FLOPs of a forward pass" if share.flops else "parameters"
    reasons = [
        *rec.reasons,
        f"keep_fp32 {keep} keeps {_pct(compute)} of the compute in fp32 ({counted}"
        + (f"; {_pct(params)} of the parameters" if params is not None and share.flops else "")
        + f"): this is close to training in fp32, and at most {_pct(1 - compute)} of the "
        f"compute gains from {rec.precision}; see the alternatives",
    ]
    for island in keep:
        error = _accumulated(island, findings, all_flagged)
        if error is not None:
            reasons.append(
                f"{island} is flagged for the error its children build up together in "
                f"{rec.precision} ({_pct(error)}), not for one of them: none alone loses more "
                "than the tolerance"
            )
    alternatives = [
        Alternative(
            "fp32",
            (),
            1.0,
            "plain fp32: the same numerics the islands give, for all of the compute, without "
            "autocast's casts; no mixed-precision speed-up",
        ),
        Alternative(
            rec.precision,
            rec.keep_fp32,
            compute,
            f"the recommendation: {_pct(compute)} of the compute stays fp32, "
            f"{_pct(1 - compute)} runs in {rec.precision}",
        ),
    ]
    kept = [f for f in findings if f.module in rec.keep_fp32]
    if kept and all(f.kind == "precision-loss" for f in kept):
        worst = max(kept, key=lambda f: f.numbers.get("rel_error", 0.0))
        error = worst.numbers.get("rel_error", 0.0)
        alternatives.append(
            Alternative(
                rec.precision,
                (),
                0.0,
                f"{rec.precision} with no islands: the output of {worst.module or '(model)'} "
                f"is then off by {_pct(error)} (relative L2 error, tolerance "
                f"{_pct(worst.numbers.get('tolerance', 0.0))}), with no overflow or underflow; "
                "many models train well like this: compare its loss curve with an fp32 run",
            )
        )
    return replace(rec, reasons=tuple(reasons), alternatives=tuple(alternatives))

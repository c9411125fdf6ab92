"""Rules about the order of backward, scaler and optimizer calls within a training step."""

from __future__ import annotations

from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis, Unit
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.flow import Event, exclusive
from ampkit.lint.rules.base import Rule, register

__all__ = [
    "BackwardUnscaledLoss",
    "ClipScaledGradients",
    "DoubleUnscale",
    "OptimizerStepBypassesScaler",
    "ScalerStepWithoutUpdate",
    "ZeroGradBeforeScalerStep",
]


def _between(unit: Unit, first: Event, last: Event, *kinds: str) -> list[Event]:
    """Events of ``kinds`` strictly between two events that can run with both of them."""
    return [
        e
        for e in unit.of(*kinds)
        if first.order < e.order < last.order and not exclusive(e, first) and not exclusive(e, last)
    ]


def _scaled_backwards(unit: Unit) -> list[Event]:
    return [e for e in unit.of("backward") if e.scaled]


def _current_backward(unit: Unit, event: Event) -> Event | None:
    """The last scaled backward of the step ``event`` belongs to (no step/update in between)."""
    for b in reversed(_scaled_backwards(unit)):
        if (
            b.order < event.order
            and not exclusive(b, event)
            and not _between(unit, b, event, "scaler_step", "scaler_update")
        ):
            return b
    return None


@register
class ClipScaledGradients(Rule):
    """Gradients are clipped while they are still multiplied by the loss scale.

    After ``scaler.scale(loss).backward()`` every gradient is multiplied by the current scale
    (65536 at the start). ``clip_grad_norm_(params, 1.0)`` then compares that inflated norm
    with 1.0 and shrinks the gradients by the scale factor, which silently turns clipping
    into "every step is clipped to almost nothing". Call ``scaler.unscale_(optimizer)`` first,
    or clip against ``max_norm * scaler.get_scale()``.

    Bad::

        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    Good::

        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """

    code = "AMP001"
    name = "clip-scaled-gradients"
    severity = Severity.ERROR
    summary = "Gradient clipping after a scaled backward without scaler.unscale_(optimizer) first."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        message = (
            "gradients are clipped while still scaled by the GradScaler; "
            "call scaler.unscale_(optimizer) before clipping"
        )
        for unit in analysis.units:
            for clip in unit.of("clip"):
                if clip.extra.get("get_scale"):
                    continue
                backward = _current_backward(unit, clip)
                if backward is not None:
                    if not _between(unit, backward, clip, "unscale"):
                        yield self.finding(analysis, clip.node, message)
                    continue
                if self._class_shaped(analysis, unit, clip):
                    yield self.finding(analysis, clip.node, message)

    @staticmethod
    def _class_shaped(analysis: FileAnalysis, unit: Unit, clip: Event) -> bool:
        """Backward in another method/function, step here, no ``unscale_`` anywhere."""
        steps_after = [
            s for s in unit.of("scaler_step") if s.order > clip.order and not exclusive(s, clip)
        ]
        if not steps_after or any(e for e in unit.of("backward") if e.order < clip.order):
            return False
        group = unit.group
        scaled = [e for e in analysis.group_events(group, "backward") if e.scaled]
        return bool(scaled) and not analysis.group_events(group, "unscale")


@register
class BackwardUnscaledLoss(Rule):
    """``loss.backward()`` on an unscaled loss in a step that uses ``scaler.step``.

    ``scaler.step(optimizer)`` divides the gradients by the scale before stepping. If the
    backward pass was not run on ``scaler.scale(loss)``, the gradients were never multiplied,
    so the update is divided by 65536 (training silently stalls), and fp16 gradients can
    underflow to zero.

    Bad::

        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).loss
        loss.backward()
        scaler.step(optimizer)
        scaler.update()

    Good::

        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """

    code = "AMP003"
    name = "backward-unscaled-loss"
    severity = Severity.ERROR
    summary = "loss.backward() on an unscaled loss in a loop that steps through scaler.step."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            steps = unit.of("scaler_step")
            for b in unit.of("backward"):
                if b.scaled or b.framework or b.ctx.amp_conditional:
                    continue
                for s in steps:
                    if exclusive(b, s) or s.order < b.order:
                        continue
                    if _between(unit, b, s, "opt_step", "scaler_update", "scaler_step"):
                        continue
                    yield self._report(analysis, b, s.obj)
                    break
                else:
                    if not steps and self._class_shaped(analysis, unit, b):
                        yield self._report(analysis, b, None)

    def _report(self, analysis: FileAnalysis, b: Event, scaler: str | None) -> Finding:
        name = scaler or "scaler"
        return self.finding(
            analysis,
            b.node,
            f"backward on an unscaled loss, but the step goes through {name}.step(); "
            f"use {name}.scale(loss).backward()",
        )

    @staticmethod
    def _class_shaped(analysis: FileAnalysis, unit: Unit, b: Event) -> bool:
        """Backward here, ``scaler.step`` in another method of the class, nothing ever scaled."""
        if unit.cls is None or unit.of("opt_step"):
            return False
        group = unit.group
        backwards = analysis.group_events(group, "backward")
        return (
            bool(analysis.group_events(group, "scaler_step"))
            and not analysis.group_events(group, "scale", "opt_step")
            and not any(e.scaled or e.ctx.amp_conditional for e in backwards)
        )


@register
class OptimizerStepBypassesScaler(Rule):
    """``optimizer.step()`` called directly after a scaled backward.

    The gradients are still multiplied by the loss scale and may contain inf/NaN from an
    fp16 overflow. ``scaler.step(optimizer)`` unscales them and skips the step on overflow;
    calling ``optimizer.step()`` applies a 65536-times too large (or NaN) update.

    Bad::

        scaler.scale(loss).backward()
        optimizer.step()
        scaler.update()

    Good::

        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """

    code = "AMP004"
    name = "optimizer-step-bypasses-scaler"
    severity = Severity.ERROR
    summary = "optimizer.step() called directly while the loss was scaled (bypasses the inf check)."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            for o in unit.of("opt_step"):
                if o.ctx.amp_conditional:
                    continue
                b = next(
                    (
                        b
                        for b in reversed(_scaled_backwards(unit))
                        if b.order < o.order
                        and not exclusive(b, o)
                        and not _between(unit, b, o, "scaler_update", "opt_step")
                    ),
                    None,
                )
                if b is None:
                    if self._class_shaped(analysis, unit, o):
                        yield self._report(analysis, o)
                    continue
                others = [
                    s for s in unit.of("scaler_step") if not exclusive(s, o) and s.arg != o.obj
                ]
                if others:
                    continue
                yield self._report(analysis, o)

    def _report(self, analysis: FileAnalysis, o: Event) -> Finding:
        return self.finding(
            analysis,
            o.node,
            f"{o.obj}.step() after a scaled backward skips the GradScaler inf/NaN check; "
            f"use scaler.step({o.obj})",
        )

    @staticmethod
    def _class_shaped(analysis: FileAnalysis, unit: Unit, o: Event) -> bool:
        """Step here, scaled backward in another method of the class, no ``scaler.step`` at all."""
        if unit.cls is None or unit.of("backward"):
            return False
        group = unit.group
        return any(e.scaled for e in analysis.group_events(group, "backward")) and not (
            analysis.group_events(group, "scaler_step")
        )


@register
class ScalerStepWithoutUpdate(Rule):
    """``scaler.step(optimizer)`` in a loop that never calls ``scaler.update()``.

    Without ``update()`` the scale never shrinks after an overflow, so every later step is
    skipped (inf gradients forever), and it never grows either. ``update()`` belongs once per
    iteration, after the step(s).

    Bad::

        for x, y in loader:
            scaler.scale(loss_fn(model(x), y)).backward()
            scaler.step(optimizer)
            optimizer.zero_grad()

    Good::

        for x, y in loader:
            scaler.scale(loss_fn(model(x), y)).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """

    code = "AMP005"
    name = "scaler-step-without-update"
    severity = Severity.ERROR
    summary = "scaler.step(...) with no scaler.update() in the loop."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        anywhere = analysis.facts.any_scaler_update
        for unit in analysis.units:
            updates = unit.of("scaler_update")
            for s in unit.of("scaler_step"):
                if s.loops:
                    loop = s.loops[-1]
                    if any(loop in u.loops for u in updates):
                        continue
                    if not updates and anywhere:
                        continue
                elif updates or anywhere:
                    continue
                yield self.finding(
                    analysis,
                    s.node,
                    f"{s.obj}.step() without {s.obj}.update() in the same loop iteration",
                )


@register
class DoubleUnscale(Rule):
    """``scaler.unscale_(optimizer)`` called twice before ``scaler.update()``.

    The second call raises ``RuntimeError: unscale_() has already been called on this
    optimizer since the last update()`` at run time, typically only on the first step that
    reaches that code path (for example, after hours of training, at the first clipping step).

    Bad::

        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()

    Good::

        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """

    code = "AMP010"
    name = "double-unscale"
    severity = Severity.ERROR
    summary = "scaler.unscale_(opt) twice before scaler.update()."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            calls = unit.of("unscale")
            for i, second in enumerate(calls):
                for first in calls[:i]:
                    if (
                        first.obj != second.obj
                        or first.arg != second.arg
                        or exclusive(first, second)
                    ):
                        continue
                    if first.node is second.node or _between(unit, first, second, "scaler_update"):
                        continue
                    yield self.finding(
                        analysis,
                        second.node,
                        f"{second.obj}.unscale_({second.arg or ''}) again before {second.obj}.update() "
                        "(raises RuntimeError)",
                    )
                    break


@register
class ZeroGradBeforeScalerStep(Rule):
    """``optimizer.zero_grad()`` between the scaled backward and ``scaler.step``.

    The gradients just computed are erased before the step uses them: the optimizer steps
    on zeros (or ``None``), so the model does not learn from that batch.

    Bad::

        scaler.scale(loss).backward()
        optimizer.zero_grad()
        scaler.step(optimizer)
        scaler.update()

    Good::

        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """

    code = "AMP014"
    name = "zero-grad-before-scaler-step"
    severity = Severity.ERROR
    summary = (
        "optimizer.zero_grad() between the scaled backward and scaler.step (gradients discarded)."
    )

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            for z in unit.of("zero_grad"):
                b = _current_backward(unit, z)
                if b is None:
                    continue
                for s in unit.of("scaler_step"):
                    if s.order < z.order or exclusive(s, z) or exclusive(s, b):
                        continue
                    if _between(unit, z, s, "backward"):
                        break
                    if analysis.facts.is_optimizer(z.obj) and s.arg != z.obj:
                        break
                    yield self.finding(
                        analysis,
                        z.node,
                        f"{z.obj}.zero_grad() discards the gradients of the scaled backward "
                        f"before {s.obj}.step() uses them",
                    )
                    break

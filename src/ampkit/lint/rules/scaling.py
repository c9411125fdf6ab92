"""Rules about gradients that are (or are not) multiplied by the loss scale when used."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis, Unit
from ampkit.lint.events import Event, exclusive
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.frameworks import framework_family
from ampkit.lint.patterns import clamps_in_hook
from ampkit.lint.rules.base import Rule, register
from ampkit.lint.rules.common import current_backward, last_before, scaling_decided_by_branch

__all__ = ["BackwardUnscaledLoss", "ClipScaledGradients", "OptimizerStepBypassesScaler"]


#: how each framework clips unscaled gradients
_FRAMEWORK_CLIP = {
    "accelerate": "clip with accelerator.clip_grad_norm_ (it unscales first)",
    "fabric": "clip with fabric.clip_gradients (it unscales first)",
    "lightning": "clip with self.clip_gradients (it unscales first)",
}


def _unscaled_after(unit: Unit, clip: Event) -> bool:
    """Whether a scaler's ``unscale_`` follows ``clip`` in the same iteration with none
    before it (the two lines in the wrong order: ``clip_grad_norm_(...)`` then
    ``scaler.unscale_(optimizer)``), the scaled backward out of view (a gradient hook)."""
    if last_before(unit, clip, "unscale", "scaler_step", "scaler_update"):
        return False
    return any(
        u.order > clip.order and not exclusive(u, clip) and u.loops == clip.loops
        for u in unit.related(clip, "unscale")
    )


def _scaling_framework(analysis: FileAnalysis, unit: Unit, clip: Event) -> str | None:
    """The framework whose backward produced the gradients ``clip`` clips, when it provably
    scales the loss (every constructor seen sets float16: ``Accelerator(mixed_precision=
    "fp16")``, ``Fabric(precision="16-mixed")``) and nothing unscales them in between."""
    for backward in last_before(unit, clip, "backward"):
        framework = backward.extra.get("framework") if backward.framework else None
        if not isinstance(framework, str) or framework not in _FRAMEWORK_CLIP:
            return None
        if analysis.framework_evidence.get(framework_family(framework)) != {"scales"}:
            return None
        if unit.between(backward, clip, "unscale", "framework_unscale", "opt_step"):
            return None
        return framework
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

    A clip is torch's (its old name ``clip_grad_norm`` included) or a helper of the project
    named after it (``from utils.util import clip_grad_norm``), and so is a function of the
    tree whose body clips with torch's, or an object of a class whose ``__call__`` does
    (``self.clip_grad = ClipGrad(cfg)`` then ``self.clip_grad(self.model)``, also re-exported
    by a package), when it only clips (one that unscales or steps too is a step of its own);
    an optimizer's own ``clip_grad_norm`` method is not (a wrapper that unscales what it
    holds).

    A framework's backward scales the loss under float16 too: ``torch.nn.utils.
    clip_grad_norm_`` right after ``accelerator.backward(loss)`` (or ``fabric.backward``,
    Lightning's ``self.manual_backward``) clips scaled gradients when the framework is
    built for float16 in the code (``Accelerator(mixed_precision="fp16")``,
    ``precision="16-mixed"``); its own clip (``accelerator.clip_grad_norm_``) unscales first.
    A framework configured outside the code is not reported.

    With the scaled backward out of view (a gradient hook of a fused back pass), a clip
    followed by the scaler's ``unscale_`` (``unscale_(optimizer)``, or a custom scaler's
    ``unscale_parameter_``) with none before it is the two lines in the wrong order, and is
    reported.

    A gradient hook that clamps (``p.register_hook(lambda g: g.clamp(-c, c))``) runs inside
    the backward, on gradients still multiplied by the scale, before any ``unscale_``: in a
    file whose loss is scaled, or that builds a GradScaler, it is reported, and so is the call of a function of the tree
    that registers such hooks (``enable_gradient_clipping(model, c)``).
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
                if clip.extra.get("get_scale") or clip.framework:
                    # a framework's clip (``accelerator.clip_grad_norm_``) unscales first
                    continue
                backward = current_backward(unit, clip)
                if backward is not None:
                    if not unit.between(backward, clip, "unscale"):
                        yield self.finding(analysis, clip.node, message)
                    continue
                if _unscaled_after(unit, clip):
                    yield self.finding(
                        analysis,
                        clip.node,
                        "gradients are clipped before the GradScaler unscales them (the "
                        "unscale_ comes after the clip); move scaler.unscale_ before clipping",
                    )
                    continue
                framework = _scaling_framework(analysis, unit, clip)
                if framework is not None:
                    yield self.finding(
                        analysis,
                        clip.node,
                        f"gradients are clipped while still scaled by {framework}'s float16 "
                        f"loss scaling; {_FRAMEWORK_CLIP[framework]}",
                    )
                    continue
                if self._class_shaped(analysis, unit, clip):
                    yield self.finding(analysis, clip.node, message)
        yield from self._clamping_hooks(analysis)

    def _clamping_hooks(self, analysis: FileAnalysis) -> Iterator[Finding]:
        """Gradient hooks that clamp, registered in a file that scales its loss or builds a
        GradScaler: the hook, or the call of a function of the tree that registers them."""
        facts = analysis.facts
        builds = any(
            ctor is not None and key not in facts.not_scalers
            for key, ctor in facts.scaler_keys.items()
        )
        if not builds and not any(b.scaled for unit in analysis.units for b in unit.of("backward")):
            return
        tail = (
            "during the scaled backward, while they are still multiplied by the loss scale "
            "(no unscale_ can come first); clip after scaler.unscale_(optimizer) instead"
        )
        project = analysis.project
        for node in analysis.nodes:
            if not isinstance(node, ast.Call):
                continue
            if clamps_in_hook(node):
                yield self.finding(analysis, node, f"this gradient hook clamps gradients {tail}")
                continue
            qual = analysis.facts.imports.qualname(node.func) if project is not None else None
            if qual is not None and project is not None and project.hook_clipper(qual):
                yield self.finding(
                    analysis,
                    node,
                    f"{qual.rsplit('.', 1)[-1]}() registers gradient hooks that clamp "
                    f"gradients {tail}",
                )

    @staticmethod
    def _class_shaped(analysis: FileAnalysis, unit: Unit, clip: Event) -> bool:
        """Backward elsewhere (another method, another module, the caller), a clip here
        followed by ``scaler.step``, and no ``unscale_`` anywhere in the group: the clip
        followed by the scaler's step is evidence enough on its own (an ``Updater.step(
        grad_scaler=...)`` whose scaled backward lives in another file)."""
        steps_after = [
            s
            for s in unit.related(clip, "scaler_step")
            if s.order > clip.order and not exclusive(s, clip)
        ]
        if not steps_after or last_before(unit, clip, "backward"):
            return False
        return not analysis.group_events(unit.group, "unscale")


@register
class BackwardUnscaledLoss(Rule):
    """``loss.backward()`` on an unscaled loss in a step that uses ``scaler.step``.

    ``scaler.step(optimizer)`` divides the gradients by the scale before stepping. If the
    backward pass was not run on ``scaler.scale(loss)``, the gradients were never multiplied,
    so the update is divided by 65536 (training silently stalls), and fp16 gradients can
    underflow to zero.

    Only a step that can consume these gradients counts: one in the same iteration, with no
    ``zero_grad()`` or other step in between (a warm-up loop that runs backward and then
    zeroes the gradients is not paired with the training loop after it). A scaled loss
    reduced before its backward (``loss = scaler.scale(loss)`` then ``loss.mean().backward()``)
    is still scaled.

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
            for b in unit.of("backward"):
                if b.scaled or b.framework or b.ctx.amp_conditional:
                    continue
                if scaling_decided_by_branch(unit, b) or _scaled_on_the_way(unit, b):
                    continue
                later = [
                    s
                    for s in unit.related(b, "scaler_step")
                    if s.order > b.order and not exclusive(b, s) and not _own_loop_step(unit, b, s)
                ]
                for s in later:
                    if not unit.between(
                        b, s, "opt_step", "scaler_update", "scaler_step", "zero_grad"
                    ):
                        yield self._report(analysis, b, s.obj)
                    break
                else:
                    if not unit.of("scaler_step") and self._class_shaped(analysis, unit, b):
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


def _scaled_on_the_way(unit: Unit, b: Event) -> bool:
    """Whether ``b`` is the backward of a followed call (a method handed the outputs) and a
    loss was scaled before the call with no backward since: the scaled value reached it
    through containers the flow does not track (``{k: scaler.scale(v) ...}`` passed to
    ``self._backward(outs)``, which backpropagates each value)."""
    if not b.ctx.inlined:
        return False
    for s in unit.related(b, "scale"):
        if s.order < b.order and not exclusive(s, b) and not unit.between(s, b, "backward"):
            return True
    return False


def _own_loop_step(unit: Unit, b: Event, s: Event) -> bool:
    """Whether ``s`` sits in a loop that ``b`` is not in and that runs its own backward:
    that loop's step belongs to that loop's backward, not to the one-off ``b`` before it."""
    if len(s.loops) <= len(b.loops):
        return False
    return s.loops[len(b.loops)] in unit.loops_with("backward")


@register
class OptimizerStepBypassesScaler(Rule):
    """``optimizer.step()`` called directly after a scaled backward.

    The gradients are still multiplied by the loss scale and may contain inf/NaN from an
    fp16 overflow. ``scaler.step(optimizer)`` unscales them and skips the step on overflow;
    calling ``optimizer.step()`` applies a 65536-times too large (or NaN) update.

    The same holds after ``scaler.unscale_(optimizer)``: the gradients are unscaled, but
    only ``scaler.step`` skips the update when they hold inf/NaN. A step in the other arm
    of the condition that decides whether the loss is scaled (``if scaling: loss =
    scaler.scale(loss) ... else: optimizer.step()``) is the unscaled mode and is not
    reported, whatever the condition is called.

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
                if self._after_unscale(unit, o):
                    yield self.finding(
                        analysis,
                        o.node,
                        f"{o.obj}.step() after scaler.unscale_({o.obj}) skips the GradScaler "
                        f"inf/NaN check (an overflow puts inf into the weights); use "
                        f"scaler.step({o.obj})",
                    )
                    continue
                b = next(
                    (
                        b
                        for b in last_before(unit, o, "backward")
                        if b.scaled and not unit.between(b, o, "scaler_update", "opt_step")
                    ),
                    None,
                )
                if b is None:
                    if self._class_shaped(analysis, unit, o):
                        yield self._report(analysis, o)
                    continue
                scales = b.extra.get("scales")
                if isinstance(scales, list) and scales and all(exclusive(s, o) for s in scales):
                    continue
                if any(not exclusive(s, o) for s in unit.related(o, "scaler_step")):
                    # another optimizer goes through the scaler here, or this one does as
                    # well (a double step, reported by AMP015)
                    continue
                yield self._report(analysis, o)

    @staticmethod
    def _after_unscale(unit: Unit, o: Event) -> bool:
        """``scaler.unscale_(opt)`` then ``opt.step()``: unscaled, but never checked for inf."""
        unscales = [u for u in last_before(unit, o, "unscale") if u.arg == o.obj]
        if not unscales or unit.between(unscales[0], o, "scaler_update"):
            return False
        return not any(
            s.arg == o.obj and not exclusive(s, o) for s in unit.related(o, "scaler_step")
        )

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

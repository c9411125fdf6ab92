"""Rules about the order of scaler and optimizer calls within (and across) training steps."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis, Unit
from ampkit.lint.events import Event, describe_test, exclusive
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.names import dotted_key
from ampkit.lint.rules.base import Rule, register
from ampkit.lint.rules.common import current_backward, last_before
from ampkit.lint.scopes import position

__all__ = [
    "ClipAfterStep",
    "DoubleOptimizerStep",
    "DoubleUnscale",
    "ScalerStepWithoutUpdate",
    "ZeroGradBeforeScalerStep",
]

_STEPS = ("scaler_step", "opt_step")


def _stepped(event: Event) -> str | None:
    """The optimizer a step event updates (``scaler.step(opt)`` and ``opt.step()`` alike)."""
    return event.arg if event.kind == "scaler_step" else event.obj


@register
class ScalerStepWithoutUpdate(Rule):
    """``scaler.step(optimizer)`` in a loop that never calls ``scaler.update()``.

    Without ``update()`` the scale never shrinks after an overflow, so every later step is
    skipped (inf gradients forever), and it never grows either. ``update()`` belongs once per
    iteration, after the step(s). Stepping several optimizers in a loop of their own
    (``for opt in optimizers: scaler.step(opt)``) and updating once after it is correct.

    Bad::

        for x, y in loader:
            scaler.scale(loss_fn(model(x), y)).backward()
            scaler.step(optimizer)
            optimizer.zero_grad()

    An update only under a condition that is false when the function's parameters keep
    their defaults, while the step is not, is reported too: ``def optimize(...,
    optimizer_idx=None, num_optimizers=1)`` stepping every call but updating only ``if
    optimizer_idx is not None and optimizer_idx + 1 == num_optimizers`` never updates with one
    optimizer (updating after the last of several, ``optimizer_idx is None or ...``, is
    right). A step through a Lightning or Fabric precision plugin's scaler
    (``trainer.precision_plugin.scaler.step(opt)``) is not: the plugin updates it.

    Good::

        for x, y in loader:
            scaler.scale(loss_fn(model(x), y)).backward()
            for opt in optimizers:
                scaler.step(opt)
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
            training = unit.loops_with("backward")
            has_updates = bool(unit.of("scaler_update"))
            for s in unit.of("scaler_step"):
                if s.obj is not None and _PLUGIN_SCALER.search(s.obj):
                    continue  # Lightning's or Fabric's precision plugin updates its scaler
                narrow = _only_when(unit, s)
                if narrow is not None:
                    yield self.finding(
                        analysis,
                        s.node,
                        f"{s.obj}.update() runs only when {narrow}, which is false with the "
                        f"parameters' defaults, so {s.obj}.step() runs without it there (the "
                        "next step raises 'step() has already been called since the last "
                        f"update()'); call {s.obj}.update() after the last step of each iteration",
                    )
                    continue
                if not s.loops:
                    # a helper that steps for its caller (``step_and_update_lr(scaler)``):
                    # the update may be the caller's, in this file or another of the tree
                    project = analysis.project
                    if has_updates or anywhere or (project and project.any_scaler_update):
                        continue
                elif any(_covers(u, s, training) for u in unit.related(s, "scaler_update")):
                    continue
                elif not has_updates and anywhere:
                    continue
                yield self.finding(
                    analysis,
                    s.node,
                    f"{s.obj}.step() without {s.obj}.update() in the same loop iteration",
                )


#: the GradScaler of a Lightning or Fabric precision plugin (``trainer.precision_plugin.
#: scaler``, ``fabric.strategy.precision.scaler``): the plugin calls its ``update()`` after
#: the optimizer steps it drives, so a callback stepping its own optimizer through it needs
#: none
_PLUGIN_SCALER = re.compile(r"(?:^|\.)(?:precision_plugin|precision)\.scaler$")

#: names of a condition that switches AMP itself (a disabled scaler's step needs no update)
_AMP_FLAG = re.compile(r"amp|fp16|half|scal|precision|mixed|dtype", re.I)


def _only_when(unit: Unit, step: Event) -> str | None:
    """The condition that every ``update()`` after ``step`` in its iteration is under and
    ``step`` is not (``if optimizer_idx is not None and optimizer_idx + 1 ==
    num_optimizers: scaler.update()`` after an unconditional step), as text; ``None`` when
    some update runs whenever the step does, or there is none."""
    updates = [
        u
        for u in unit.related(step, "scaler_update")
        if u.order > step.order
        and not exclusive(u, step)
        and u.loops[: len(step.loops)] == step.loops
        and u.obj == step.obj
    ]
    if not updates:
        return None
    shown = None
    for update in updates:
        extra = [
            (key, arm)
            for key, arm in update.ctx.arms
            if (key, arm) not in step.ctx.arms and not key.startswith(("try", "match"))
        ]
        names = set().union(*(unit.test_names.get(key, set()) for key, _ in extra))
        if not extra or any(_AMP_FLAG.search(n) for n in names):
            return None
        if update.loops != step.loops:
            return None  # an update in a loop of its own: not the same shape
        defaults = _defaults(unit.node)
        for key, arm in extra:
            test = unit.test_nodes.get(key)
            value = _value(test, defaults) if test is not None else _UNKNOWN
            if value is _UNKNOWN or bool(value) is (arm == 0):
                continue
            text = unit.condition(key)
            shown = shown or (f"`{text}`" if arm == 0 else f"not `{text}`")
            break
        else:
            return None  # the update runs on a call with the defaults
    return shown


_UNKNOWN = object()


def _defaults(fn: ast.AST) -> dict[str, object]:
    """The constant defaults of a function's parameters (``optimizer_idx=None``)."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {}
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(
        zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
    )
    pairs += [
        (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
    ]
    return {a.arg: d.value for a, d in pairs if isinstance(d, ast.Constant)}


def _value(node: ast.expr, names: dict[str, object]) -> object:
    """A condition's value when the parameters hold their defaults (``_UNKNOWN`` when it
    reads anything else)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id, _UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _value(node.operand, names)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        unknown = False
        for operand in node.values:
            value = _value(operand, names)
            if value is _UNKNOWN:
                unknown = True
            elif bool(value) is not is_and:
                return value  # ``False and ...``, ``True or ...``
        return _UNKNOWN if unknown else is_and
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _value(node.left, names), _value(node.comparators[0], names)
        op = node.ops[0]
        if isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None):
            if left is _UNKNOWN or right is _UNKNOWN:
                return _UNKNOWN
            return (left is right) is isinstance(op, ast.Is)
    return _UNKNOWN


def _covers(update: Event, step: Event, training: set[int]) -> bool:
    """Whether ``update`` runs once per training iteration in which ``step`` runs."""
    if step.loops[-1] in update.loops:
        return True
    depth = len(update.loops)
    inner = step.loops[depth:]
    # loops between the update and the step only iterate over optimizers (no backward)
    return step.loops[:depth] == update.loops and not any(loop in training for loop in inner)


@register
class DoubleUnscale(Rule):
    """``scaler.unscale_(optimizer)`` can run twice before ``scaler.update()``.

    The second call raises ``RuntimeError: unscale_() has already been called on this
    optimizer since the last update()`` at run time, typically only on the first step that
    reaches that code path (for example, after hours of training, at the first clipping step).

    The next iteration of the loop counts too: ``unscale_`` on every micro-step while
    ``update()`` only runs every N steps (behind a condition on a counter or the loop
    variable) raises on the second micro-step.

    Bad::

        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()

    Bad (across iterations)::

        for i, batch in enumerate(loader):
            scaler.scale(model(batch) / accum_steps).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if (i + 1) % accum_steps == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()

    An update in each arm of a condition counts as one on every path, also when one arm
    hands the scaler to a function of another module that steps and updates it
    (``debug_utils.step_and_log_diff(scaler, opt, ...)``), and when the arm that skips the
    update replaces the scaler by a new one (``self.scaler = GradScaler()``), which has
    unscaled nothing yet.

    Accelerate's ``accelerator.clip_grad_norm_`` / ``clip_grad_value_`` unscale the
    gradients themselves: ``accelerator.unscale_gradients()`` right before them unscales
    twice.

    Good::

        for i, batch in enumerate(loader):
            scaler.scale(model(batch) / accum_steps).backward()
            if (i + 1) % accum_steps == 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    """

    code = "AMP010"
    name = "double-unscale"
    severity = Severity.ERROR
    summary = "scaler.unscale_(opt) twice before scaler.update(), also across loop iterations."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            for explicit in unit.of("framework_unscale"):
                clip = self._unscaling_clip(unit, explicit)
                if clip is not None:
                    yield self.finding(
                        analysis,
                        explicit.node,
                        f"{explicit.obj}.unscale_gradients() and then {clip.obj}.clip_grad_norm_/"
                        "clip_grad_value_, which unscales the gradients again (raises "
                        "RuntimeError under fp16); drop the explicit unscale",
                    )
            for second in unit.of("unscale"):
                first = self._earlier_unscale(unit, second)
                if first is not None:
                    yield self.finding(
                        analysis,
                        second.node,
                        f"{second.obj}.unscale_({second.arg or ''}) again before "
                        f"{second.obj}.update() (raises RuntimeError)",
                    )
                    continue
                guard = self._update_guard(unit, second)
                if guard is not None:
                    yield self.finding(
                        analysis,
                        second.node,
                        f"{second.obj}.unscale_({second.arg or ''}) runs on every iteration but "
                        f"{second.obj}.update() only when {guard}; the next unscale_() before "
                        "update() raises RuntimeError (move unscale_ under the same condition)",
                    )

    @staticmethod
    def _unscaling_clip(unit: Unit, explicit: Event) -> Event | None:
        """The framework clip after ``explicit`` (same accelerator, no step or update
        between) that unscales the gradients itself."""
        for clip in unit.related(explicit, "clip"):
            if (
                clip.order <= explicit.order
                or not clip.framework
                or clip.obj != explicit.obj
                or exclusive(clip, explicit)
            ):
                continue
            if unit.between(explicit, clip, "opt_step", "scaler_step", "scaler_update"):
                return None
            return clip
        return None

    @staticmethod
    def _earlier_unscale(unit: Unit, second: Event) -> Event | None:
        for first in last_before(unit, second, "unscale"):
            if first.obj != second.obj or first.arg != second.arg or first.node is second.node:
                continue
            if unit.between(first, second, "scaler_update"):
                return None
            if any(n.target == second.obj for n in unit.between(first, second, "scaler_new")):
                return None  # the scaler was replaced by a fresh one in between
            return first
        return None

    @staticmethod
    def _update_guard(unit: Unit, unscale: Event) -> str | None:
        """The condition that lets an iteration unscale without updating, if there is one."""
        if not unscale.loops:
            return None
        loop = unscale.loops[-1]
        # a fresh scaler bound to the same name (``self.scaler = GradScaler()`` on the arm
        # that skips the update) has no unscaled optimizer either: it counts as an update
        updates = [
            u
            for u in unit.related(unscale, "scaler_update", "scaler_new")
            if loop in u.loops
            and not exclusive(u, unscale)
            and (u.kind == "scaler_update" or u.target == unscale.obj)
        ]
        if not updates:
            return None
        mine = set(unscale.ctx.arms)
        options: list[list[tuple[str, int]]] = []
        for update in updates:
            varying = [
                (key, arm)
                for key, arm in update.ctx.arms
                if (key, arm) not in mine and unit.varies_in(key, loop, ignoring=unscale.obj)
            ]
            if not varying:
                return None
            # an accumulation counter (``(i + 1) % n == 0``) first: the guard to name
            varying.sort(key=lambda key_arm: not _counts(unit, key_arm[0]))
            options.append(varying)
        first = next((i for i, u in enumerate(updates) if u.kind == "scaler_update"), None)
        if first is None:
            return None
        skipped = _skipping_path(options, name=first)
        return None if skipped is None else _when(unit, *skipped)


def _counts(unit: Unit, key: str) -> bool:
    """Whether the condition ``key`` reads a remainder (``i % n``), as a counter does."""
    node = unit.test_nodes.get(key)
    return node is not None and any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node)
    )


def _skipping_path(
    options: list[list[tuple[str, int]]], name: int = 0, budget: int = 2000
) -> tuple[str, int] | None:
    """An iteration that runs none of the updates, if the conditions allow one.

    ``options[i]`` are the condition arms update ``i`` runs in; an iteration skips it when one
    of them is not taken. The search picks, for each update, an arm to leave untaken, such
    that no condition is both taken and untaken (``if log: update() else: update()`` leaves
    none). It returns the arm picked for update ``name`` (the guard to name), or ``None``
    when every iteration runs an update (or the search gives up, which reports nothing).
    """
    chosen: dict[str, int] = {}  # condition -> the arm left untaken
    steps = 0

    def pick(i: int) -> bool:
        nonlocal steps
        if i == len(options):
            return True
        for key, arm in options[i]:
            steps += 1
            if steps > budget:
                return False
            if key in chosen:
                if chosen[key] == arm and pick(i + 1):
                    return True
                continue
            chosen[key] = arm
            if pick(i + 1):
                return True
            del chosen[key]
        return False

    if not pick(0):
        return None
    return next((key, arm) for key, arm in options[name] if chosen.get(key) == arm)


@register
class ZeroGradBeforeScalerStep(Rule):
    """``optimizer.zero_grad()`` between the scaled backward and ``scaler.step``.

    The gradients just computed are erased before the step uses them: the optimizer steps
    on zeros (or ``None``), so the model does not learn from that batch. The same holds for
    a framework's backward (``accelerator.backward(loss)``, which scales the loss under
    fp16) followed by ``optimizer.zero_grad()`` and that optimizer's ``step()``, and for a
    ``zero_grad()`` run on every iteration of a loop whose ``scaler.step`` runs every ``n``
    (``if (i + 1) % n == 0:``): it erases the gradients accumulated since the last step, so
    each step sees one micro-batch.

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
                every = self._every_iteration(analysis, unit, z)
                if every is not None:
                    yield self.finding(
                        analysis,
                        z.node,
                        f"{z.obj}.zero_grad() runs every iteration but {every.obj}.step() only "
                        f"every {every.ctx.accum}: it discards the gradients accumulated since "
                        "the last step; zero them right after the step",
                    )
                    continue
                b = current_backward(unit, z)
                if b is None:
                    found = self._framework_step(unit, z)
                    if found is not None:
                        yield self.finding(
                            analysis,
                            z.node,
                            f"{z.obj}.zero_grad() discards the gradients of {found.obj}.backward() "
                            f"before {z.obj}.step() uses them",
                        )
                    continue
                for s in unit.related(z, "scaler_step"):
                    if s.order < z.order or exclusive(s, z) or exclusive(s, b):
                        continue
                    if unit.between(z, s, "backward"):
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

    @staticmethod
    def _every_iteration(analysis: FileAnalysis, unit: Unit, z: Event) -> Event | None:
        """The accumulating ``scaler.step`` (run every ``n`` iterations of the loop) whose
        gradients ``z``, run on every iteration of that loop beside a scaled backward,
        erases before they are all in."""
        if not z.loops or z.ctx.accum is not None:
            return None
        loop = z.loops[-1]
        for s in unit.related(z, "scaler_step"):
            if s.ctx.accum is None or not s.loops or s.loops[-1] != loop or exclusive(s, z):
                continue
            if analysis.facts.is_optimizer(z.obj) and s.arg != z.obj:
                continue
            # (no more conditional than a scaled backward of every iteration of that loop)
            if any(
                b.scaled
                and b.loops
                and b.loops[-1] == loop
                and b.ctx.accum is None
                and set(z.ctx.arms) <= set(b.ctx.arms)
                and not exclusive(b, z)
                and not exclusive(b, s)
                for b in unit.related(z, "backward")
            ):
                return s
        return None

    @staticmethod
    def _framework_step(unit: Unit, z: Event) -> Event | None:
        """The framework backward (``accelerator.backward(loss)``, which scales the loss
        under fp16) whose gradients ``z`` erases right before the same optimizer's
        ``step()`` (the prepared optimizer steps through the framework's GradScaler)."""
        before = last_before(unit, z, "backward", "opt_step", "scaler_step")
        if not before or before[0].kind != "backward" or not before[0].framework:
            return None
        b = before[0]
        if exclusive(b, z) or b.extra.get("framework") == "lightning":
            return None
        for s in unit.related(z, "opt_step"):
            if s.order < z.order or s.obj != z.obj or exclusive(s, z) or s.framework:
                continue
            if unit.between(z, s, "backward", "zero_grad"):
                return None
            return b
        return None


@register
class DoubleOptimizerStep(Rule):
    """The same optimizer is stepped twice in one iteration.

    Typically ``scaler.step(optimizer)`` inside ``if use_amp:`` and then an unconditional
    ``optimizer.step()`` after the branch: in AMP mode the weights are updated twice with
    the same gradients (and the second update bypasses the GradScaler's inf/NaN check). Two
    steps in the arms of one condition, with a new backward pass between them, with the
    optimizer's state restored between them (``optimizer.load_state_dict(saved)``: a test
    that checks the restored optimizer still steps), or with no backward pass before them
    at all (a test driving a wrapper), are fine.

    Bad::

        scaler.scale(loss).backward()
        if use_amp:
            scaler.step(optimizer)
            scaler.update()
        optimizer.step()

    Good::

        scaler.scale(loss).backward()
        if use_amp:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
    """

    code = "AMP015"
    name = "double-optimizer-step"
    severity = Severity.ERROR
    summary = (
        "The same optimizer is stepped twice (scaler.step and optimizer.step) in one iteration."
    )

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            for second in unit.of(*_STEPS):
                target = _stepped(second)
                if target is None:
                    continue
                for first in last_before(unit, second, *_STEPS):
                    if _stepped(first) != target or first.node is second.node:
                        continue
                    if (
                        first.loops == second.loops
                        and last_before(unit, first, "backward")
                        and not unit.between(first, second, "backward")
                        and not _state_loaded_between(analysis, first, second, target)
                    ):
                        yield self.finding(
                            analysis,
                            second.node,
                            f"{target} is stepped again (already stepped on line {first.line}) "
                            "with the same gradients; step it once per iteration",
                        )
                    break


def _when(unit: Unit, key: str, arm: int) -> str:
    """```x``` or ``not `x``` for the arm ``arm`` of the condition ``key``."""
    node = unit.test_nodes.get(key)
    if node is None:
        return "a condition holds"
    holds = arm == describe_test(node).flip
    return f"`{ast.unparse(node)}`" if holds else f"not `{ast.unparse(node)}`"


def _state_loaded_between(analysis: FileAnalysis, first: Event, second: Event, target: str) -> bool:
    """Whether ``target.load_state_dict(...)`` is written between two steps of one function
    (a test that restores the optimizer and checks it still steps): the second step starts
    from the restored state, not from the first one's."""
    facts = analysis.facts
    home = facts.owner_of(first.node)
    if home is None or facts.owner_of(second.node) is not home:
        return False
    lo, hi = position(first.node), position(second.node)
    return any(
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "load_state_dict"
        and dotted_key(call.func.value) == target
        and lo < position(call) < hi
        and facts.owner_of(call) is home
        for call in facts.of_type(ast.Call)
        if isinstance(call, ast.Call)
    )


@register
class ClipAfterStep(Rule):
    """Gradients are clipped after the optimizer step has already used them.

    Clipping changes ``.grad`` in place; once ``scaler.step(optimizer)`` or
    ``optimizer.step()`` has run, the update is done, so the clip has no effect on it (and
    the clipped gradients are usually zeroed next). Clip after ``scaler.unscale_`` and
    before the step.

    Bad::

        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    Good::

        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """

    code = "AMP016"
    name = "clip-after-step"
    severity = Severity.ERROR
    summary = "Gradient clipping after the optimizer step (the clip has no effect on the update)."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            for clip in unit.of("clip"):
                before = last_before(unit, clip, "backward", *_STEPS)
                if not before or before[0].kind == "backward":
                    continue
                after = [
                    e
                    for e in unit.related(clip, "backward", *_STEPS)
                    if e.order > clip.order and not exclusive(e, clip)
                ]
                if after and after[0].kind != "backward":
                    continue  # clipping for a later step (another optimizer)
                step = before[0]
                yield self.finding(
                    analysis,
                    clip.node,
                    f"gradients are clipped after {_stepped(step) or 'the optimizer'} was stepped "
                    f"on line {step.line}; clip before the step",
                )

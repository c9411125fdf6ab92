"""Rules about autocast dtypes, devices and manual casts."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis, Unit
from ampkit.lint.events import Event, exclusive
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.frameworks import BACKWARD_FRAMEWORKS, framework_scales
from ampkit.lint.names import BF16, FP16, AutocastInfo, dotted_key
from ampkit.lint.patterns import loaded_keys
from ampkit.lint.rules.base import Rule, register
from ampkit.lint.scopes import atom_name

__all__ = [
    "BackwardInsideAutocast",
    "CastInsideAutocastLoop",
    "FloatSixteenOnCpu",
    "FloatSixteenWithoutScaler",
    "HalfStateDictSaved",
    "ScalerWithBfloat16",
]

_FRAMEWORK_HINTS = {
    "lightning": "manual_backward scales the loss only under precision='16-mixed'",
    "fabric": "fabric.backward scales the loss only under precision='16-mixed'",
    "accelerate": "accelerator.backward scales the loss only under mixed_precision='fp16'",
    "deepspeed": "the engine's backward scales the loss only with fp16 enabled in its config",
}

_SCALER_KINDS = ("scale", "scaler_step", "scaler_update", "unscale", "scaler_new")

#: calls that keep something of a training run (weights, a checkpoint, an exported file)
_KEEPS = re.compile(r"save|checkpoint|state_dict|export|write|dump|push_to_hub|log_model", re.I)
#: calls that time code (``time.time()``, ``torch.cuda.synchronize()``, a profiler)
_TIMERS = frozenset(
    {"time", "perf_counter", "perf_counter_ns", "monotonic", "synchronize", "elapsed_time",
     "profile", "timeit"}
)  # fmt: skip


def _throughput_benchmark(analysis: FileAnalysis) -> bool:
    """Whether the file times code and keeps nothing: no call that saves, checkpoints,
    exports or writes anything (its module-level training only measures speed)."""
    timed = False
    for call in analysis.of_type(ast.Call):
        func = call.func  # type: ignore[attr-defined]
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if _KEEPS.search(name):
            return False
        if name in _TIMERS and (name != "time" or dotted_key(func) == "time.time"):
            timed = True
    return timed


def _info(event: Event) -> AutocastInfo:
    info = event.extra["info"]
    if not isinstance(info, AutocastInfo):
        raise TypeError("autocast event without AutocastInfo")
    return info


@register
class FloatSixteenWithoutScaler(Rule):
    """float16 autocast used for training without a GradScaler.

    fp16 has a smallest normal value of 6e-5; many gradients are smaller and flush to zero
    in the backward pass unless the loss is first multiplied by a large scale. bfloat16 has
    the range of fp32 and needs no scaler.

    A framework's backward (Lightning ``self.manual_backward(loss)``, ``fabric.backward``,
    ``accelerator.backward``, a DeepSpeed engine's ``backward``) is a backward too, but those
    frameworks scale the loss themselves when configured for float16, so it is reported only
    when the framework provably does not: Lightning and Fabric when no float16 precision
    (``precision="16-mixed"``, or one read from a variable or a config) is seen, since their
    default is 32-bit; Accelerate and DeepSpeed, which are often configured outside the code,
    only when built with a literal non-float16 setting (``mixed_precision="no"``).

    Only reachable fp16 training counts. Not reported: autocast inside ``torch.no_grad()`` /
    ``torch.inference_mode()`` (or in a function decorated with them: a frozen backbone whose
    features feed a head trained outside autocast), an autocast block that only runs
    modules frozen with ``requires_grad_(False)`` (or ``p.requires_grad = False`` over their
    parameters), and autocast switched by
    ``enabled=flag`` where ``flag`` is a parameter that defaults to ``False`` and that no call
    in the linted code passes, and a throughput benchmark (a training loop written at module
    level in a file that times it, ``time.time()`` / ``torch.cuda.synchronize()`` / a
    profiler, and keeps nothing: no save, checkpoint, ``state_dict``, export or write), whose
    trained weights are thrown away. A GradScaler built with a literal ``enabled=False``
    scales nothing, so it does not count as one.

    A dtype chosen by a flag or an option counts when some value of it is float16, and the
    message names it ("when `amp_dtype` is 'float16'"): ``torch.float16 if args.fp16 else
    torch.bfloat16`` and ``{...}[args.dtype]`` (a float16 written in the file), and
    ``getattr(torch, args.amp_dtype)`` with an ``add_argument`` of that name whose
    ``choices=`` include ``float16``, or a config field ``amp_dtype: Literal[...]`` that does
    (in any file of the tree; this one only when no file of the tree builds a GradScaler). Choices that leave float16 out (bfloat16 and float32) are
    silent, also when a float16 arm is written. A dtype picked by comparing an option with
    enum members (``if opts.precision == Precision.FP16: amp_dtype = torch.float16``) counts
    the same way, also when every GradScaler of the file is disabled. An autocast built in one
    method and entered in another (``self.ctx = torch.autocast(...)`` in ``__init__``,
    ``with self.ctx:`` in the loop) is reported where it is built, where its dtype is chosen.

    Bad::

        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).loss
        loss.backward()
        optimizer.step()

    Good::

        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """

    code = "AMP002"
    name = "fp16-without-scaler"
    severity = Severity.ERROR
    summary = (
        "float16 autocast used for training (a backward follows) with no GradScaler in the step."
    )

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        facts = analysis.facts
        disabled = facts.scalers_all_disabled()
        if (facts.any_scaler or facts.scaler_keys or facts.scaler_named) and not disabled:
            return
        evidence = analysis.framework_evidence
        benchmark: bool | None = None
        for unit in analysis.units:
            if not disabled and (
                unit.of(*_SCALER_KINDS) or any(b.scaled for b in unit.of("backward"))
            ):
                continue
            steps = ("opt_step", "scaler_step") if disabled else ("opt_step",)
            if not unit.of(*steps) and not analysis.group_events(unit.group, *steps):
                continue  # a backward without an optimizer step is a gradient check, not training
            for a in unit.of("autocast"):
                info = _info(a)
                if a.ctx.grad_free:
                    continue  # nothing under it is differentiated
                when = ""
                if FP16 not in info.dtypes or len(info.dtypes) > 1:
                    if FP16 not in info.dtypes and (
                        info.dtypes or not (disabled or analysis.no_scaler_anywhere)
                    ):
                        continue  # no fp16
                    answer = analysis.pairing.fp16_possible(a)
                    if answer.verdict == "never" or (
                        answer.verdict == "unknown" and FP16 not in info.dtypes
                    ):
                        continue  # the flags and options never choose fp16 here
                    when = answer.when()
                if analysis.flag_off(info.enabled, a.node):
                    continue  # ``enabled=use_amp`` where nothing sets use_amp
                if unit.node is analysis.tree and not a.ctx.inlined:
                    if benchmark is None:
                        benchmark = _throughput_benchmark(analysis)
                    if benchmark:
                        continue  # a timed module-level loop whose weights are thrown away
                body = a.extra.get("body")
                if isinstance(
                    body, (ast.With, ast.AsyncWith, ast.FunctionDef, ast.AsyncFunctionDef)
                ) and facts.frozen_only(body.body):
                    continue  # only a frozen (``requires_grad_(False)``) module runs in fp16
                for b in unit.related(a, "backward"):
                    if b.order <= a.order or exclusive(a, b):
                        continue
                    framework = b.extra.get("framework") if b.framework else None
                    if b.framework and not (
                        isinstance(framework, str)
                        and framework in BACKWARD_FRAMEWORKS
                        and not framework_scales(framework, evidence)
                    ):
                        continue  # a framework that may scale the loss itself
                    message = (
                        f"float16 autocast is used for training without a GradScaler{when}; "
                        "small gradients underflow to zero (add torch.amp.GradScaler or use "
                        "bfloat16)"
                    )
                    if isinstance(framework, str):
                        message += f"; {_FRAMEWORK_HINTS[framework]}"
                    if disabled:
                        message += "; every GradScaler here is built with enabled=False"
                    yield self.finding(analysis, _chosen_at(analysis, a), message)
                    break


def _chosen_at(analysis: FileAnalysis, region: Event) -> ast.AST:
    """Where an autocast region's dtype is chosen: the ``torch.autocast(...)`` call stored in
    a variable in another function of this file (``self.ctx = torch.autocast(...)`` in
    ``__init__``, entered as ``with self.ctx:`` in the loop), else the ``with`` item."""
    call = getattr(region.extra.get("info"), "node", None)
    if (
        isinstance(call, ast.Call)
        and call is not region.node
        and "written" not in region.extra
        and not isinstance(region.node, ast.Call)
        and analysis.parent(call) is not None
        and analysis.scope_of(call) is not analysis.scope_of(region.node)
    ):
        return call
    return region.node


@register
class CastInsideAutocastLoop(Rule):
    """Manual ``.half()`` / ``.bfloat16()`` / ``.to(float16)`` in a training loop that uses autocast.

    autocast already runs each op in the precision that is safe for it (matmuls in fp16,
    softmax and reductions in fp32). Casting inputs or the model by hand forces everything
    to low precision (losing the fp32 ops autocast protects), and casting every iteration
    costs a copy.

    Reported: a cast inside the autocast block, or a cast whose result is used inside the
    autocast block of the same training loop (a loop of the cast's own function that runs a
    backward pass), also under a branch that chooses the precision mode when the branch is
    written inside the autocast block. Not reported: a cast in such a branch outside the
    block (``if use_fp16: x = x.half()`` before it), a value cast straight back
    (``model.half().float()``), a separate low-precision copy that autocast never sees, and
    casts in loops without a backward (inference).

    Bad::

        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x.bfloat16()), y)
            loss.backward()
            optimizer.step()

    Good::

        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
    """

    code = "AMP007"
    name = "manual-cast-with-autocast"
    severity = Severity.WARNING
    summary = "Manual .half()/.bfloat16()/.to(float16) of inputs or model in a training loop that also uses autocast."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            if not unit.of("autocast"):
                continue
            training = unit.loops_with("backward")
            for cast in unit.of("cast"):
                if cast.extra.get("recast"):
                    continue
                if cast.ctx.amp_conditional and cast.ctx.autocast is None:
                    continue  # the precision mode's own cast, outside autocast
                own = cast.own_loops
                if not own or own[-1] not in training:
                    continue
                if cast.ctx.autocast is not None or self._used_under_autocast(unit, cast, own[-1]):
                    yield self.finding(
                        analysis,
                        cast.node,
                        f"manual cast to {cast.dtype} inside a loop that uses autocast; "
                        "let autocast choose the precision per op",
                    )

    @staticmethod
    def _used_under_autocast(unit: Unit, cast: Event, loop: int) -> bool:
        """Whether the cast value (the assigned name, or a module cast in place) is read
        inside an autocast block of the same loop."""
        key = cast.target or (cast.obj if cast.extra.get("alone") else None)
        if key is None:
            return False
        for region in unit.related(cast, "autocast"):
            body = region.extra.get("body")
            if loop not in region.loops or not isinstance(body, (ast.With, ast.AsyncWith)):
                continue
            if exclusive(region, cast):
                continue
            uses = region.extra.get("uses")
            if not isinstance(uses, frozenset):
                uses = region.extra["uses"] = loaded_keys(body.body)
            if key in uses:
                return True
        return False


@register
class ScalerWithBfloat16(Rule):
    """A GradScaler combined with bfloat16 autocast.

    bfloat16 has the exponent range of fp32, so gradients do not underflow and loss scaling
    is not needed. The scaler adds an inf/NaN check and a multiply per step for nothing and
    makes the code look like fp16 training.

    Each scaled backward is paired with the autocast regions before it in its iteration, and
    each name with the binding that reaches it (a scaler rebound for a later bfloat16 section,
    ``if x: scaler = GradScaler() else: scaler = None``; in a nested function, the
    enclosing function's autocast and scaler). A scaler handed back by a call
    (``optimizer, scaler = init_opt(...)``) whose ``scale`` runs is taken as enabled. When flags or a config decide the
    pairing (``GradScaler(enabled=use_amp)`` next to ``autocast(dtype=torch.bfloat16,
    enabled=use_amp)``; ``amp_dtype = torch.bfloat16 if cfg.amp_bf16 else torch.float16``;
    ``if dtype == "bfloat16": mixed_precision = True`` then ``GradScaler() if
    mixed_precision else None``, also in another file of the tree), it is reported when some
    value of those flags makes the scaler enabled with a bfloat16 region, and the message names
    that condition ("when `use_amp` is true and `amp_bf16` is true"). A flag the code does not
    decide takes the values of its ``add_argument`` ``choices=`` (or ``Literal[...]``
    field), else the constants it is compared with (also after ``.lower()``, and through a
    name bound to a config read: ``which = cfg.get("dtype")`` then ``if which.lower() ==
    "bfloat16":``), else true and false; a dtype parameter
    also takes the torch dtypes the tree's own calls pass it by keyword
    (``fit(..., amp_dtype=torch.bfloat16)``). A scaler enabled by the dtype itself
    (``enabled=(amp_dtype == torch.float16)``, ``enabled=not bf16``) is never paired with
    bfloat16 and is silent, as is an autocast whose device is chosen at run time with its
    default dtype (off CUDA, a CUDA GradScaler disables itself). A scaler enabled by the
    autocast dtype being set at all (``GradScaler(enabled=amp_dtype is not None)`` with
    ``autocast(dtype=amp_dtype)``) is on for bfloat16 too, and is reported "when `amp_dtype`
    is torch.bfloat16"; a mode compared with its names (``dtype=torch.bfloat16 if mode ==
    "bf16" else torch.float16``) holds those names, not dtypes.

    A scaler no autocast of the file meets (built in a launcher and handed to a trainer
    defined elsewhere) is reported where it is built when it is enabled with a flag named for
    bfloat16 true and none named for float16 (``GradScaler() if cfg.use_fp16 or
    cfg.use_bf16 else None``), or with an option holding "bf16" (``enabled=args.precision in
    ("fp16", "bf16")``).

    Bad::

        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).loss
        scaler.scale(loss).backward()

    Good::

        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).loss
        loss.backward()
    """

    code = "AMP008"
    name = "scaler-with-bf16"
    severity = Severity.WARNING
    summary = "A GradScaler combined with bfloat16 autocast (not needed)."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        paired: set[str] = set()
        for unit in analysis.units:
            regions = unit.of("autocast")
            if not regions:
                continue
            keys = {e.obj for e in unit.events if e.obj is not None}
            # each scale call, and each scaled backward whose scale call is not in the flow
            uses = list(unit.of("scale")) + [
                b for b in unit.of("backward") if b.scaled and not _scales_of(b)
            ]
            uses = sorted(uses, key=lambda e: e.order) or list(unit.of("scaler_step"))
            unknown = False
            for use in uses:
                answer = analysis.pairing.scaler_with_bf16(_paired_regions(unit, use), use)
                if answer.verdict == "bad":
                    yield self.finding(
                        analysis,
                        use.node,
                        "GradScaler used with bfloat16 autocast"
                        f"{answer.when()}; bfloat16 does not need loss scaling",
                    )
                    break
                unknown = unknown or answer.verdict == "unknown"
            else:
                if unknown:
                    found = list(self._single_value(analysis, unit))
                    yield from found
                    if not found:
                        # undecided here (a scaler handed in as a parameter): judged where
                        # it is built, by the flag that enables it
                        continue
            paired |= keys
        yield from self._built_for_bf16(analysis, paired)

    def _built_for_bf16(self, analysis: FileAnalysis, paired: set[str]) -> Iterator[Finding]:
        """Scalers whose autocast is out of view (used by no unit of the file with an
        autocast), built enabled when a flag or option says bfloat16."""
        facts = analysis.facts
        for stmt in facts.of_type(ast.Assign, ast.AnnAssign):
            value = stmt.value  # type: ignore[attr-defined]
            targets = getattr(stmt, "targets", None) or [stmt.target]  # type: ignore[attr-defined]
            keys = {dotted_key(t) for t in targets} - {None}
            ctor = facts.resolver.scaler_ctor(value) if value is not None else None
            if ctor is None or keys & paired:
                continue
            answer = analysis.pairing.scaler_on_bf16_flag(stmt, ctor)  # type: ignore[arg-type]
            if answer.verdict == "bad" and not _flag_enables_fp16_autocast(analysis, value):
                yield self.finding(
                    analysis,
                    ctor,
                    f"GradScaler enabled{answer.when()}; bfloat16 does not need loss scaling",
                )

    def _single_value(self, analysis: FileAnalysis, unit: Unit) -> Iterator[Finding]:
        """The judgement without following flags: every region of the unit is statically
        bfloat16 and every scaler it uses is built enabled (or comes from elsewhere)."""
        facts = analysis.facts
        regions = unit.of("autocast")
        if any(_info(a).dtype != BF16 for a in regions):
            return
        used = (
            unit.of("scale") + [b for b in unit.of("backward") if b.scaled] + unit.of("scaler_step")
        )
        keys = {e.obj for e in used if e.obj is not None}
        keys |= {k for k in facts.scaler_keys if k in facts.scaled_keys or k in keys}
        ctors = [facts.scaler_keys[k] for k in keys if facts.scaler_keys.get(k) is not None]
        if any(facts.resolver.scaler_enabled(c) != "yes" for c in ctors if c is not None):
            return
        yield self.finding(
            analysis,
            min(used, key=lambda e: e.order).node,
            "GradScaler used with bfloat16 autocast; bfloat16 does not need loss scaling",
        )


def _flag_enables_fp16_autocast(analysis: FileAnalysis, value: ast.expr) -> bool:
    """Whether a flag the scaler's construction reads also enables a float16 autocast of
    the file (``GradScaler() if use_bfloat16 else None`` beside ``autocast(dtype=
    torch.float16, enabled=use_bfloat16)``): whatever its name says, the scaler serves
    float16."""
    flags = {
        atom_name(n)
        for n in ast.walk(value)
        if isinstance(n, (ast.Name, ast.Attribute)) and dotted_key(n) is not None
    }
    for unit in analysis.units:
        for region in unit.of("autocast"):
            info = _info(region)
            call = info.node
            if info.dtype != FP16 or not isinstance(call, ast.Call):
                continue
            enabled = next((kw.value for kw in call.keywords if kw.arg == "enabled"), None)
            if enabled is not None and any(
                isinstance(n, (ast.Name, ast.Attribute)) and atom_name(n) in flags
                for n in ast.walk(enabled)
            ):
                return True
    return False


def _scales_of(backward: Event) -> list[Event]:
    scales = backward.extra.get("scales")
    return [e for e in scales if isinstance(e, Event)] if isinstance(scales, list) else []


def _paired_regions(unit: Unit, use: Event) -> list[Event]:
    """The autocast regions whose values ``use`` can scale: those before it in its iteration
    and after the previous backward (all of the unit's when none comes before)."""
    before = [
        a for a in unit.related(use, "autocast") if a.order < use.order and not exclusive(a, use)
    ]
    backs = [
        b.order
        for b in unit.related(use, "backward")
        if b.order < use.order and not exclusive(b, use) and b is not use
    ]
    if backs:
        before = [a for a in before if a.order > max(backs)]
    return before or list(unit.of("autocast"))


def _undecided(info: AutocastInfo, call: ast.Call) -> bool:
    """Whether an autocast call's device or dtype is read from something the file decides
    (a name, a test, ``**kwargs``): neither is a literal that already rules out fp16 on CPU."""
    if info.device not in (None, "cpu") or (info.dtypes and FP16 not in info.dtypes):
        return False
    return info.device is None or info.dtype is None or any(k.arg is None for k in call.keywords)


@register
class FloatSixteenOnCpu(Rule):
    """float16 autocast on ``device_type="cpu"``.

    Most CPUs have no fast float16 arithmetic: CPU autocast in fp16 is usually slower than
    fp32. CPU autocast is meant for bfloat16 (its default).

    A device and dtype read from names count when the file's own tests make them CPU and
    float16 together, and the message names the condition: ``dtype = torch.float16 if
    device.type == "cpu" else torch.bfloat16`` (the arms swapped), also through a dict passed
    as ``torch.autocast(**kwargs)`` and its ``kwargs["dtype"] = ...``. The CPU arm of
    ``"cuda" if torch.cuda.is_available() else "cpu"`` (the fallback of a machine without a
    GPU) and an autocast in the non-CPU arm of ``nullcontext() if device == "cpu" else
    torch.autocast(...)`` are not reported.

    Bad::

        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)

    Good::

        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
    """

    code = "AMP009"
    name = "fp16-autocast-on-cpu"
    severity = Severity.WARNING
    summary = 'float16 autocast on device_type="cpu" (very slow on most CPUs; use bfloat16).'

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for node in analysis.nodes:
            if isinstance(node, ast.Call):
                info = analysis.facts.resolver.autocast(node)
                if info is None or info.disabled:
                    continue
                when = ""
                if info.device != "cpu" or info.dtype != FP16:
                    if not _undecided(info, node):
                        continue
                    answer = analysis.pairing.fp16_on_cpu(node)
                    if answer.verdict != "bad":
                        continue
                    when = answer.when()
                yield self.finding(
                    analysis,
                    node,
                    f"float16 autocast on the CPU{when} is slow on most CPUs; use "
                    "dtype=torch.bfloat16 there",
                )


@register
class BackwardInsideAutocast(Rule):
    """The backward pass is called inside the autocast block.

    autocast should wrap only the forward pass and the loss. Backward ops run in the dtype
    their forward op chose anyway; running ``backward()`` under autocast is not needed and
    is discouraged by the PyTorch AMP documentation. It is a warning, not a note: what runs
    inside the backward still sees the autocast state (the recomputed forward of an
    activation-checkpointed block, a custom autograd function, the backward of a
    ``torch.compile`` region, which has followed the forward's autocast by default), so the
    gradients can be computed in another precision than the plain loop's, silently; a file
    whose only finding is this one makes ``ampkit lint`` exit with 1, so CI sees it. A
    function decorated with ``@torch.autocast(...)`` is an autocast block too: a backward in
    its body runs under it (put the decorator on the forward-only loss function instead).
    A call inside the block of a function or method of the file whose body runs the
    backward (``with autocast(): train_step(batch)``) is reported at the call. A
    framework's backward (``accelerator.backward(loss)``, ``fabric.backward(loss)``) counts
    like ``loss.backward()``, and Accelerate's and Fabric's ``autocast()`` blocks are
    autocast blocks too.

    Bad::

        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).loss
            loss.backward()

    Good::

        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).loss
        loss.backward()
    """

    code = "AMP012"
    name = "backward-inside-autocast"
    severity = Severity.WARNING
    summary = "backward called inside the autocast block."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        regions = _framework_autocast_blocks(analysis)
        for unit in analysis.units:
            sites: set[int] = set()
            for b in unit.of("backward"):
                if b.ctx.autocast is None:
                    block = _inside(analysis, b.node, regions) if not b.ctx.inlined else None
                    if block is not None:
                        yield self.finding(
                            analysis,
                            b.node,
                            f"backward() inside the `{block}` block; end the block after the loss",
                        )
                    continue
                if not b.ctx.inlined:
                    yield self.finding(
                        analysis,
                        b.node,
                        "backward() inside the autocast block; end the block after the loss",
                    )
                    continue
                site = b.ctx.site
                if site is None or b.ctx.site_autocast is not b.ctx.autocast or id(site) in sites:
                    continue  # (the callee's own autocast is reported in the callee)
                sites.add(id(site))
                text = ast.unparse(site.func) if isinstance(site, ast.Call) else "the call"
                yield self.finding(
                    analysis,
                    site,
                    f"`{text}(...)` runs backward() (line {getattr(b.node, 'lineno', '?')}) "
                    "inside this autocast block; call it after the block, or end the block "
                    "after the loss",
                )


def _framework_autocast_blocks(analysis: FileAnalysis) -> list[tuple[ast.With, str]]:
    """``with accelerator.autocast():`` and ``with fabric.autocast():`` blocks, each with the
    text of its autocast call: the framework's autocast, its dtype set where the framework
    object is built."""
    facts = analysis.facts
    found: list[tuple[ast.With, str]] = []
    for node in facts.of_type(ast.With):
        for item in node.items:  # type: ignore[attr-defined]
            call = item.context_expr
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "autocast"
                and facts.framework_of(dotted_key(call.func.value)) in ("accelerate", "fabric")
            ):
                found.append((node, ast.unparse(call)))  # type: ignore[arg-type]
                break
    return found


def _inside(
    analysis: FileAnalysis, node: ast.AST, blocks: list[tuple[ast.With, str]]
) -> str | None:
    """The framework autocast (``accelerator.autocast()``) of the block of ``blocks`` whose
    body ``node`` is written in, in the same function; ``None`` when it is in none."""
    line = getattr(node, "lineno", 0)
    owner = analysis.facts.owner_of(node)
    for block, autocast in blocks:
        if (
            block.body[0].lineno <= line <= (block.end_lineno or 0)
            and analysis.facts.owner_of(block) is owner
        ):
            return autocast
    return None


def _saved_models(unit: Unit, save: Event) -> set[str]:
    """Model keys whose ``state_dict()`` is (directly or through a variable) saved by ``save``."""
    models: set[str] = set()
    held = {
        e.target: e.obj
        for e in unit.of("state_dict")
        if e.target and e.obj and e.order < save.order
    }
    call = save.node
    if not isinstance(call, ast.Call) or not call.args:
        return models
    for sub in ast.walk(call.args[0]):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "state_dict"
        ):
            key = dotted_key(sub.func.value)
            if key is not None:
                models.add(key)
        key = dotted_key(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else None
        model = held.get(key) if key is not None else None
        if model is not None:
            models.add(model)
    return models


def _halved_in_place(analysis: FileAnalysis, save: Event) -> str | None:
    """The model of a ``model.half().state_dict()`` that ``save`` writes, directly or
    through a variable bound to it: ``.half()`` converts the model itself, mid-training."""
    call = save.node
    if not isinstance(call, ast.Call) or not call.args:
        return None
    values: list[ast.expr] = [call.args[0]]
    key = dotted_key(call.args[0])
    if key is not None:
        values += analysis.facts.assignments.get(key, [])
    for value in values:
        for sub in ast.walk(value):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr == "state_dict"
                and isinstance(sub.func.value, ast.Call)
                and isinstance(sub.func.value.func, ast.Attribute)
                and sub.func.value.func.attr == "half"
                and not sub.func.value.args
            ):
                model = dotted_key(sub.func.value.func.value)
                if model is not None:
                    return model
    return None


@register
class HalfStateDictSaved(Rule):
    """``torch.save`` of the ``state_dict()`` of a model converted with ``.half()``.

    The checkpoint then holds fp16 weights: 3 of the 16 mantissa bits of fp32 are kept,
    small weight updates are lost when training resumes from it, and loading it into an
    fp32 model silently upcasts already-rounded values. Save the fp32 master weights
    (convert a copy for fp16 inference, or call ``.float()`` before saving).

    ``torch.save(model.half().state_dict(), path)`` in a training function is reported too
    (also through a variable bound to it): ``.half()`` converts the model itself, so the
    checkpoint is fp16 and training goes on in fp16; a copy (``{k: v.half() for k, v in
    model.state_dict().items()}``) leaves the model as it was.

    Only files that train the model count: converting a model to fp16 and saving it for
    inference (nothing stepped in that function) is an export, not a lost checkpoint.

    Bad::

        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
        model.half()
        torch.save(model.state_dict(), "model.pt")

    Good::

        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
        torch.save(model.state_dict(), "model.pt")
        model.half()  # for fp16 inference only
    """

    code = "AMP013"
    name = "fp16-weights-saved"
    severity = Severity.WARNING
    summary = "torch.save of a state_dict() taken from a model converted with .half() (fp16 weights saved)."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            if not unit.of("backward", "opt_step", "scaler_step"):
                continue  # an fp16 export of a model that is not trained here
            casts = unit.of("cast", "float")
            for save in unit.of("save"):
                for model in sorted(_saved_models(unit, save)):
                    state = None
                    for c in casts:
                        if c.order > save.order:
                            break
                        if model in (c.obj, c.target) and (c.target is None or c.target == model):
                            state = c.dtype
                    if state == FP16:
                        yield self.finding(
                            analysis,
                            save.node,
                            f"{model} was converted with .half(); this saves float16 weights "
                            "(save the float32 weights instead)",
                        )
                        break
                else:
                    halved = _halved_in_place(analysis, save)
                    if halved is not None:
                        yield self.finding(
                            analysis,
                            save.node,
                            f"{halved}.half().state_dict() converts the trained model to float16 "
                            "and saves float16 weights (save the float32 weights, or convert "
                            "a copy: {k: v.half() for k, v in state_dict.items()})",
                        )

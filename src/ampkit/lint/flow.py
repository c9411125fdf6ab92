"""The ordered flow of AMP-relevant events in one unit of code (a function or a script).

A :class:`FlowBuilder` walks statements in source order, which inside one loop iteration is
also execution order, and records an :class:`~ampkit.lint.events.Event` for every call a
rule cares about: backward passes, scaler calls, optimizer steps, gradient clipping and
rescaling, dtype casts, saves and autocast regions, each with its
:class:`~ampkit.lint.events.Context`. Calls of functions defined in the same file (module
level, local to the function, ``self`` methods, and a method of another object when only one
class of the file defines that name) are followed (inlined), so a trainer
whose backward and step live in different methods is analysed as one step. ``self``
methods inherited from a base class in another file of the project are followed too, with
the facts of the file they are written in; their events stand at the call that led there
(the location in the linted file).

Besides the events, the builder records what the rules need to reason about the *next*
iteration of a loop: which variables each loop rebinds (so a condition that reads one of
them can change between iterations) and which names each condition reads.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import replace

from ampkit.lint.events import Context, Event, TestInfo, describe_test, reset_counter
from ampkit.lint.facts import FileFacts, FunctionNode
from ampkit.lint.inherit import Methods
from ampkit.lint.names import CLIP_APIS, CLIP_CALL_NAMES, AutocastInfo, dotted_key
from ampkit.lint.patterns import (
    RESCALE_OPS,
    bound_keys,
    cast_receiver,
    continue_guard,
    is_grad_key,
    rescales_grads,
    runs_once,
    scaled_operand,
    terminates,
    uses_get_scale,
)

__all__ = ["FlowBuilder"]

_MAX_INLINE_DEPTH = 4
_MAX_INLINES_PER_UNIT = 200


class FlowBuilder:
    """Builds the event list of one unit; see the module docstring."""

    def __init__(
        self,
        facts: FileFacts,
        methods: dict[str, FunctionNode],
        local: dict[str, FunctionNode] | None = None,
        written_in: dict[int, FileFacts] | None = None,
        tables: dict[int, Methods] | None = None,
    ) -> None:
        self.facts = facts
        self.methods = methods
        #: method id -> the method table of its class, for ``self.x()`` inside a method of
        #: another class followed from here
        self.tables = tables or {}
        self.local = local or {}
        #: the linted file's facts, and those of other files' methods (by function id)
        self.home = facts
        self.written_in = written_in or {}
        #: the call in the linted file through which this builder's code runs (another file)
        self._site: ast.AST | None = None
        self.events: list[Event] = []
        #: loop id -> keys (re)bound somewhere inside that loop, callees included
        self.loop_bound: dict[int, set[str]] = {}
        #: test key -> the names the condition reads, and the condition itself
        self.test_names: dict[str, frozenset[str]] = {}
        self.test_nodes: dict[str, ast.expr] = {}
        self._tests: dict[int, TestInfo] = {}
        self._stack: list[ast.AST] = []
        self._inlines = 0
        self._scaled_by_key: dict[str, list[Event]] = {}
        self._scale_by_call: dict[int, Event] = {}

    def build(self, body: list[ast.stmt], owner: ast.AST | None = None) -> list[Event]:
        """Walk ``body`` (the unit's statements) and return its events in order."""
        ctx = Context()
        if owner is not None:
            self._stack.append(owner)
            ctx = self._entered(owner, ctx)
        self._block(body, ctx)
        return self.events

    def _entered(self, fn: ast.AST, ctx: Context) -> Context:
        """The context of the body of ``fn`` as its decorators make it: gradients off under
        ``@torch.no_grad()`` / ``@torch.inference_mode()``, and the whole body (its backward
        included) an autocast region under ``@torch.autocast("cuda")`` or an older spelling."""
        decorators = getattr(fn, "decorator_list", ())
        if any(self.facts.resolver.grad_mode(d) is False for d in decorators):
            ctx = replace(ctx, grad_free=True)
        for decorator in decorators:
            info = self._autocast_of(decorator)
            if info is not None and not info.disabled:
                self._emit("autocast", decorator, ctx, extra={"info": info, "body": fn})
                return replace(ctx, autocast=info)
        return ctx

    def _test(self, test: ast.expr) -> TestInfo:
        info = self._tests.get(id(test))
        if info is None:
            info = describe_test(test)
            if info.divisor is None:
                divisor = self._flag_divisor(test)
                if divisor is not None:
                    info = replace(info, divisor=divisor)
            self._tests[id(test)] = info
            self.test_names[info.key] = info.names
            self.test_nodes.setdefault(info.key, test)
        return info

    def _early_return_divisor(self, stmt: ast.stmt) -> str | None:
        """The count of ``if count != 0: return`` after ``count = (count + 1) % n``, also as
        the last statement of an enclosing ``if`` (``if update_freq > 1: ...; if count:
        return``): what follows runs every ``n`` calls."""
        if not isinstance(stmt, ast.If) or stmt.orelse or not stmt.body:
            return None
        if terminates(stmt.body):
            return self._test(stmt.test).divisor
        return self._early_return_divisor(stmt.body[-1])

    def _flag_divisor(self, test: ast.expr) -> str | None:
        """The accumulation count of a flag tested alone or in an ``and``: ``is_step = (i + 1)
        % n == 0`` then ``if is_step:`` (every binding of the flag such a comparison), or of
        a remainder kept in a variable: ``count = (count + 1) % n`` then ``if count == 0:``
        (or ``!= 0``, before a ``return``)."""
        operands = (
            test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        )
        for operand in operands:
            if (
                isinstance(operand, ast.Compare)
                and len(operand.ops) == 1
                and isinstance(operand.ops[0], (ast.Is, ast.Eq))
                and isinstance(operand.comparators[0], ast.Constant)
                and operand.comparators[0].value is True
            ):
                operand = operand.left  # ``if is_step is True:``
            if (
                isinstance(operand, ast.Compare)
                and len(operand.ops) == 1
                and isinstance(operand.ops[0], (ast.Eq, ast.NotEq))
                and isinstance(operand.comparators[0], ast.Constant)
                and operand.comparators[0].value == 0
            ):
                operand = operand.left
                remainders = True
            else:
                remainders = False
            key = dotted_key(operand) if isinstance(operand, (ast.Name, ast.Attribute)) else None
            values = self.facts.assignments.get(key, []) if key is not None else []
            read = _remainder if remainders else _modulo_comparison
            # (a counter's starting value, ``self.count = 0``, is no other kind of binding)
            divisors = {read(v) for v in values if not (remainders and isinstance(v, ast.Constant))}
            if len(divisors) == 1 and None not in divisors:
                return divisors.pop()
        return None

    def _bind(self, keys: list[str], ctx: Context) -> None:
        for loop in ctx.loops:
            self.loop_bound[loop].update(keys)

    # -- statements -------------------------------------------------------------------------
    def _block(self, stmts: list[ast.stmt], ctx: Context) -> None:
        for stmt in stmts:
            self._stmt(stmt, ctx)
            divisor = continue_guard(stmt) or self._early_return_divisor(stmt)
            if divisor is not None:
                ctx = replace(ctx, accum=divisor)
            # Code after ``if c: ...; continue`` only runs when ``c`` is false: it sits in the
            # other arm, so it never runs together with what the terminated arm did.
            if isinstance(stmt, ast.If):
                info = self._test(stmt.test)
                if terminates(stmt.body) and not terminates(stmt.orelse):
                    ctx = replace(ctx, arms=(*ctx.arms, (info.key, 1 ^ info.flip)))
                elif terminates(stmt.orelse) and not terminates(stmt.body):
                    ctx = replace(ctx, arms=(*ctx.arms, (info.key, info.flip)))
            elif (
                isinstance(stmt, ast.Try)
                and stmt.handlers
                and all(terminates(h.body) for h in stmt.handlers)
            ):
                ctx = replace(ctx, arms=(*ctx.arms, (f"try{id(stmt)}", 0)))

    def _loop(self, stmt: ast.For | ast.AsyncFor | ast.While, ctx: Context) -> Context:
        if runs_once(stmt.body):
            return replace(ctx, accum=None)
        self.loop_bound.setdefault(id(stmt), set())
        return replace(ctx, loops=(*ctx.loops, id(stmt)), accum=None)

    def _stmt(self, stmt: ast.stmt, ctx: Context) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            self._exprs(stmt, ctx)
            inner = self._loop(stmt, ctx)
            self._bind(bound_keys(stmt.target), inner)
            self._block(stmt.body, inner)
            self._block(stmt.orelse, ctx)
        elif isinstance(stmt, ast.While):
            inner = self._loop(stmt, ctx)
            self._test(stmt.test)
            self._exprs(stmt, inner)
            self._block(stmt.body, inner)
            self._block(stmt.orelse, ctx)
        elif isinstance(stmt, ast.If):
            self._exprs(stmt, ctx)
            info = self._test(stmt.test)
            amp = ctx.amp_conditional or info.amp
            counted = reset_counter(stmt)
            divisor = info.divisor or (counted[1] if counted else None)
            for arm, body in ((0, stmt.body), (1, stmt.orelse)):
                sub = replace(
                    ctx,
                    arms=(*ctx.arms, (info.key, arm ^ info.flip)),
                    accum=divisor or ctx.accum,
                    amp_conditional=amp,
                )
                self._block(body, sub)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self._with(stmt, ctx)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            key = f"try{id(stmt)}"
            self._block(stmt.body, replace(ctx, arms=(*ctx.arms, (key, 0))))  # type: ignore[attr-defined]
            for index, handler in enumerate(stmt.handlers, start=1):  # type: ignore[attr-defined]
                self._block(handler.body, replace(ctx, arms=(*ctx.arms, (key, index))))
            self._block(stmt.orelse, ctx)  # type: ignore[attr-defined]
            self._block(stmt.finalbody, ctx)  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.Match):
            self._exprs(stmt, ctx)
            for index, case in enumerate(stmt.cases):
                self._block(case.body, replace(ctx, arms=(*ctx.arms, (f"match{id(stmt)}", index))))
        else:
            self._simple(stmt, ctx)

    def _with(self, stmt: ast.With | ast.AsyncWith, ctx: Context) -> None:
        inner = ctx
        self._exprs(stmt, ctx)
        for item in stmt.items:
            if item.optional_vars is not None:
                self._bind(bound_keys(item.optional_vars), ctx)
            mode = self.facts.resolver.grad_mode(item.context_expr)
            if mode is not None:
                inner = replace(inner, grad_free=not mode)
            info = self._autocast_of(item.context_expr)
            if info is not None and not info.disabled:
                where = replace(ctx, grad_free=inner.grad_free)
                self._emit("autocast", item.context_expr, where, extra={"info": info, "body": stmt})
                inner = replace(inner, autocast=info)
        self._block(stmt.body, inner)

    def _simple(self, stmt: ast.stmt, ctx: Context) -> None:
        target = None
        value = getattr(stmt, "value", None)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            keys = [k for t in targets for k in bound_keys(t)]
            self._bind(keys, ctx)
            if len(targets) == 1 and not isinstance(stmt, ast.AugAssign):
                target = dotted_key(targets[0])
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, RESCALE_OPS):
                if is_grad_key(dotted_key(stmt.target)):
                    self._emit("grad_rescale", stmt, ctx)
        alone = isinstance(stmt, ast.Expr)
        for call in self.facts.calls.get(id(stmt), ()):
            self._call(call, ctx, target if call is value else None, alone and call is value)
        if target is not None and value is not None:
            self._note_scaled(target, value)

    def _note_scaled(self, target: str, value: ast.expr) -> None:
        """Remember which ``scaler.scale(...)`` events a variable holds (``loss = scaler.scale(loss)``)."""
        if not self._scale_by_call:
            return
        feeding = [
            self._scale_by_call[id(n)] for n in ast.walk(value) if id(n) in self._scale_by_call
        ]
        if feeding:
            self._scaled_by_key.setdefault(target, []).extend(feeding)
        elif isinstance(value, (ast.Name, ast.Attribute)):
            source = dotted_key(value)
            if source in self._scaled_by_key:
                self._scaled_by_key.setdefault(target, []).extend(self._scaled_by_key[source])

    def _exprs(self, stmt: ast.stmt, ctx: Context) -> None:
        """The calls in a compound statement's own header (loop iterable, condition, ...)."""
        for call in self.facts.calls.get(id(stmt), ()):
            self._call(call, ctx, None)

    def _autocast_of(self, node: ast.expr) -> AutocastInfo | None:
        info = self.facts.resolver.find_autocast(node)
        if info is None:
            key = dotted_key(node.func if isinstance(node, ast.Call) else node)
            if key is not None:
                info = self.facts.autocast_vars.get(key)
        return info

    # -- calls --------------------------------------------------------------------------------
    def _emit(self, kind: str, node: ast.AST, ctx: Context, **fields: object) -> Event:
        if self._site is not None:
            # written in another file: located at the linted file's call that runs it
            extra = fields.setdefault("extra", {})
            if isinstance(extra, dict):
                extra["written"] = node
            node = self._site
        event = Event(kind, node, len(self.events), ctx, **fields)  # type: ignore[arg-type]
        self.events.append(event)
        return event

    def _call(self, call: ast.Call, ctx: Context, target: str | None, alone: bool = False) -> None:
        facts = self.facts
        func = call.func
        qual = facts.imports.qualname(func)
        if qual in CLIP_APIS or (
            qual is not None
            and not qual.startswith("torch.")
            and qual.rpartition(".")[2] in CLIP_CALL_NAMES
        ):
            # (also a project's own ``utils.clip_grad_value_(params, limit)`` or imported
            # ``clip_grad_norm(params, names, limit)``; with a limit of ``None`` it only
            # measures the norm)
            if not _no_limit(call):
                self._emit("clip", call, ctx, extra={"get_scale": uses_get_scale(call)})
            return
        stepper = (
            facts.project.scaler_stepper(qual)
            if qual is not None and facts.project is not None and "." in qual
            else None
        )
        if stepper is not None and stepper < len(call.args):
            scaler = dotted_key(call.args[stepper])
            if scaler is not None and facts.is_scaler(scaler):
                # a helper of another module that steps and updates the scaler it is handed
                optimizer = call.args[stepper + 1] if stepper + 1 < len(call.args) else None
                arg = dotted_key(optimizer) if optimizer is not None else None
                self._emit("scaler_step", call, ctx, obj=scaler, arg=arg)
                self._emit("scaler_update", call, ctx, obj=scaler)
                return
        if facts.calls_clipper(func) and not _no_limit(call):
            # a clipping function of the tree, or a clip object called on the model
            self._emit("clip", call, ctx, extra={"get_scale": uses_get_scale(call)})
            return
        if qual == "torch.save":
            self._emit("save", call, ctx)
            return
        if facts.resolver.scaler_ctor(call) is not None:
            self._emit("scaler_new", call, ctx, target=target)
            return
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "unscale_gradients"
            and facts.framework_of(dotted_key(func.value)) == "accelerate"
        ):
            # ``accelerator.unscale_gradients()``: its GradScaler's unscale_ of the
            # optimizers (not a rescale of the gradients by a count)
            self._emit("framework_unscale", call, ctx, obj=dotted_key(func.value))
            return
        receiver = func.value if isinstance(func, ast.Attribute) else None
        sole = (
            facts.sole_method(func.attr, self.methods.values())
            if isinstance(func, ast.Attribute)
            and receiver is not None
            and dotted_key(receiver) not in (None, "self")
            else None
        )
        if sole is not None:
            # ``runner.engine.backward_loss(loss)``: the one class of the file with that
            # method (not the caller's own class: ``self.model.train()`` in ``Trainer``);
            # its ``self.x()`` calls are that class's methods
            self._inline(sole, ctx, site=call, table=self.tables.get(id(sole)))
            return
        if rescales_grads(call):
            self._emit("grad_rescale", call, ctx)
            return
        if isinstance(func, ast.Name):
            callee = self.local.get(func.id) or facts.functions.get(func.id)
            if callee is not None:
                self._inline(callee, ctx, site=call)
            return
        if not isinstance(func, ast.Attribute):
            return
        self._method_call(call, func, ctx, target, alone)

    def _method_call(
        self, call: ast.Call, func: ast.Attribute, ctx: Context, target: str | None, alone: bool
    ) -> None:
        facts = self.facts
        attr, recv = func.attr, func.value
        obj = dotted_key(recv)
        first = call.args[0] if call.args else None
        arg = None
        if first is not None and attr in ("step", "unscale_"):
            arg = dotted_key(first) or ast.unparse(first)
        if obj == "self" and attr in self.methods:
            fn = self.methods[attr]
            self._inline(fn, ctx, self.written_in.get(id(fn), self.home), call)
        elif attr == "backward":
            self._backward(call, recv, obj, ctx)
        elif attr == "manual_backward":
            self._emit(
                "backward",
                call,
                ctx,
                obj=obj,
                framework=True,
                loss=call.args[0] if call.args else None,
                extra={"framework": "lightning"},
            )
        elif facts.framework_clip(obj, attr):
            self._emit("clip", call, ctx, obj=obj, framework=True)
        elif (
            attr in ("clip_grad_norm_", "clip_grad_value_")
            and obj is not None
            and not facts.is_optimizer(obj)
            and facts.framework_of(obj) is None
        ):
            # an FSDP module's ``model.clip_grad_norm_(max_norm)``: clips what it holds
            self._emit("clip", call, ctx, obj=obj, extra={"get_scale": uses_get_scale(call)})
        elif attr == "scale" and facts.is_scaler(obj, call):
            event = self._emit("scale", call, ctx, obj=obj, target=target)
            self._scale_by_call[id(call)] = event
        elif attr == "step" and facts.is_scaler(obj, call):
            self._emit("scaler_step", call, ctx, obj=obj, arg=arg)
        elif attr == "step" and facts.holds_no_scaler(obj, call) and first is not None:
            # a disabled GradScaler's ``step(optimizer)`` is ``optimizer.step()``
            self._emit("opt_step", call, ctx, obj=dotted_key(first))
        elif attr == "step" and not call.args and facts.is_optimizer(obj):
            self._emit("opt_step", call, ctx, obj=obj)
        elif attr == "step" and not call.args and facts.framework_of(obj) == "deepspeed":
            self._emit("opt_step", call, ctx, obj=obj, framework=True)
        elif attr == "update" and facts.is_scaler(obj, call):
            self._emit("scaler_update", call, ctx, obj=obj)
        elif (
            attr == "unscale_" or attr.startswith("unscale_") and facts.is_scaler(obj, call)
        ) and not facts.holds_no_scaler(obj, call):
            # (a disabled GradScaler's ``unscale_`` does nothing)
            self._emit("unscale", call, ctx, obj=obj, arg=arg)
        elif attr == "zero_grad":
            self._emit("zero_grad", call, ctx, obj=obj)
        elif attr == "state_dict":
            self._emit("state_dict", call, ctx, obj=obj, target=target)
        elif attr in ("half", "bfloat16", "float", "to", "type"):
            self._cast(call, attr, obj, ctx, target, alone)

    def _backward(self, call: ast.Call, recv: ast.expr, obj: str | None, ctx: Context) -> None:
        if call.args and self.facts.imports.qualname(call.func) == "torch.autograd.backward":
            # ``torch.autograd.backward(loss)``: a plain backward of its first argument
            loss = call.args[0]
            scaled = self.facts.is_scaled(loss)
            self._emit(
                "backward",
                call,
                ctx,
                obj=dotted_key(loss),
                scaled=scaled,
                loss=scaled_operand(loss) if scaled else loss,
            )
            return
        given = next((kw.value for kw in call.keywords if kw.arg == "loss"), None)
        if (call.args or given is not None) and not _gradient_of_itself(recv, call):
            # ``accelerator.backward(loss)``, ``fabric.backward(loss)``, ``engine.backward(loss)``,
            # ``booster.backward(loss=loss, optimizer=optimizer)``
            framework = self.facts.framework_of(obj)
            self._emit(
                "backward",
                call,
                ctx,
                obj=obj,
                framework=True,
                loss=call.args[0] if call.args else given,
                extra={"framework": framework} if framework is not None else {},
            )
            return
        while (
            isinstance(recv, ast.Call)
            and isinstance(recv.func, ast.Attribute)
            and recv.func.attr in _KEEPS_SCALE
        ):
            # ``loss.mean().backward()`` after ``loss = scaler.scale(loss)``: still scaled
            recv = recv.func.value
            obj = dotted_key(recv)
        feeding = []
        if self._scale_by_call:
            feeding = [
                self._scale_by_call[id(n)] for n in ast.walk(recv) if id(n) in self._scale_by_call
            ]
        if obj is not None:
            feeding.extend(self._scaled_by_key.get(obj, ()))
        if isinstance(recv, ast.Name):
            # a local variable: only what this flow assigned to it counts, or a parameter
            # every caller fills with ``scaler.scale(...)``
            scaled = (
                bool(feeding)
                or self.facts.is_scaled_call(recv)
                or self.facts.is_scaled_param(call, recv.id)
            )
        else:
            scaled = bool(feeding) or self.facts.is_scaled(recv)
        loss = scaled_operand(recv) if scaled else recv
        extra: dict[str, object] = {"scales": feeding}
        if call.args:
            extra["gradient"] = call.args[0]
        self._emit("backward", call, ctx, obj=obj, scaled=scaled, loss=loss, extra=extra)

    def _cast(
        self,
        call: ast.Call,
        attr: str,
        obj: str | None,
        ctx: Context,
        target: str | None,
        alone: bool = False,
    ) -> None:
        dtype: str | None
        if attr in ("half", "bfloat16") and not call.args:
            dtype = "float16" if attr == "half" else "bfloat16"
        elif attr == "float" and not call.args:
            dtype = "float32"
        elif attr in ("to", "type"):
            candidates = [*call.args, *(kw.value for kw in call.keywords if kw.arg == "dtype")]
            dtypes = [self.facts.resolver.dtype(c) for c in candidates]
            dtype = next((d for d in dtypes if d is not None), None)
            if dtype is None:
                return
        else:
            return
        if dtype in ("float16", "bfloat16"):
            # ``model.half()`` on its own line converts the module in place; a cast inside
            # an expression only makes a new tensor for that expression
            self._emit(
                "cast", call, ctx, obj=obj, target=target, dtype=dtype, extra={"alone": alone}
            )
        else:
            recast = cast_receiver(call.func)
            self._emit("float", call, ctx, obj=obj, target=target, dtype=dtype)
            if recast is not None:
                # ``model.half().float()``: the low-precision value never survives the line
                for event in reversed(self.events):
                    if event.extra.get("written", event.node) is recast and event.kind == "cast":
                        event.extra["recast"] = True
                        break

    def _inline(
        self,
        fn: FunctionNode,
        ctx: Context,
        facts: FileFacts | None = None,
        site: ast.AST | None = None,
        table: Methods | None = None,
    ) -> None:
        """Follow a call into ``fn``, written in the file of ``facts`` (default: this
        builder's), called at ``site``; ``table`` is the method table of ``fn``'s class when
        it is not the caller's."""
        facts = facts or self.facts
        if fn in self._stack or len(self._stack) >= _MAX_INLINE_DEPTH:
            return
        if self._inlines >= _MAX_INLINES_PER_UNIT or not facts.is_interesting(fn):
            return
        self._inlines += 1
        self._stack.append(fn)
        inner = replace(ctx, inlined=True, base=len(ctx.loops))
        if not ctx.inlined:
            inner = replace(inner, site=site, site_autocast=ctx.autocast)
        builder = self if facts is self.facts else self._elsewhere(facts, site)
        saved = builder.methods, builder.written_in
        if table is not None:
            builder.methods, builder.written_in = table.table, table.written_in
        inner = builder._entered(fn, inner)
        try:
            builder._block(fn.body, inner)
        finally:
            builder.methods, builder.written_in = saved
            self._stack.pop()
            self._inlines = builder._inlines

    def _elsewhere(self, facts: FileFacts, site: ast.AST | None) -> FlowBuilder:
        """A builder for code written in the file of ``facts`` that adds to this flow (the
        same events, loops and conditions)."""
        child = copy.copy(self)
        child.facts = facts
        child.local = {}
        child._site = None if facts is self.home else (self._site or site)
        return child


#: tensor methods whose result keeps the loss scale of the tensor they are called on
_KEEPS_SCALE = frozenset({"mean", "sum", "float", "squeeze", "contiguous"})


def _gradient_of_itself(recv: ast.expr, call: ast.Call) -> bool:
    """Whether ``recv.backward(arg)`` is a tensor's backward given a ``gradient`` that is
    computed from the tensor itself (``loss.backward(loss / n)``): the argument is the
    upstream gradient, not a loss handed to a framework, and the tensor backpropagated is
    ``recv``, undivided (its gradients are scaled by ``loss / n``, not by ``1 / n``). A
    receiver that only appears inside a call (``torch.ones_like(loss) / n``) leaves the
    argument standing for the loss."""
    key = dotted_key(recv)
    if key is None or not call.args:
        return False

    def mentions(node: ast.AST) -> bool:
        if isinstance(node, ast.Call):
            return False
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted_key(node) == key:
            return True
        return any(mentions(child) for child in ast.iter_child_nodes(node))

    return mentions(call.args[0])


def _no_limit(call: ast.Call) -> bool:
    """Whether a clip call's limit (its second argument, ``max_norm=`` or ``clip_value=``)
    is a literal ``None``: nothing is clipped."""
    limit = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg in ("max_norm", "clip_value"):
            limit = kw.value
    return isinstance(limit, ast.Constant) and limit.value is None


def _remainder(value: ast.expr) -> str | None:
    """The ``n`` of ``(count + 1) % n`` (a remainder and nothing else)."""
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod):
        if not (isinstance(value.left, ast.Constant) and isinstance(value.left.value, str)):
            return ast.unparse(value.right)
    return None


def _modulo_comparison(value: ast.expr) -> str | None:
    """The ``n`` of ``(i + 1) % n == 0`` or ``i % n != 0`` (a comparison of a remainder and
    nothing else: a flag for the stepping or for the accumulating iterations), also beside
    other tests in an ``or``/``and`` (``(i == last) or ((i + 1) % n == 0)``: the epoch's last
    batch steps too)."""
    if isinstance(value, ast.BoolOp):
        found = {_modulo_comparison(v) for v in value.values} - {None}
        return found.pop() if len(found) == 1 else None
    if (
        isinstance(value, ast.Compare)
        and len(value.ops) == 1
        and isinstance(value.ops[0], (ast.Eq, ast.NotEq))
    ):
        return _remainder(value.left)
    return None

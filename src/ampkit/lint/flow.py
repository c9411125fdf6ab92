"""The ordered flow of AMP-relevant events in one unit of code (a function or a script).

A :class:`FlowBuilder` walks statements in source order, which inside one loop iteration is
also execution order, and records an :class:`Event` for every call a rule cares about:
backward passes, scaler calls, optimizer steps, gradient clipping, dtype casts, saves and
autocast regions. Each event remembers the loops around it, the ``if`` arms it sits in (so
that ``if use_amp: ... else: ...`` arms are known to exclude each other), the autocast region
it runs under and the gradient-accumulation guard (``if (i + 1) % n == 0``) it is behind.
Calls of functions and ``self`` methods defined in the same file are followed (inlined), so
a trainer whose backward and step live in different methods is analysed as one step.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace

from ampkit.lint.facts import FileFacts
from ampkit.lint.names import CLIP_APIS, AutocastInfo, dotted_key, is_optimizer_name

__all__ = ["Context", "Event", "FlowBuilder", "exclusive"]

_AMP_WORDS = re.compile(
    r"(^|[^a-z])amp|scaler|fp16|half|mixed|precision|autocast|float16", re.IGNORECASE
)
_MAX_INLINE_DEPTH = 4
_MAX_INLINES_PER_UNIT = 200


@dataclass(frozen=True)
class Context:
    """Where an event happens: loops, ``if`` arms, autocast region, accumulation guard."""

    loops: tuple[int, ...] = ()
    arms: tuple[tuple[str, int], ...] = ()
    autocast: AutocastInfo | None = None
    accum: str | None = None
    amp_conditional: bool = False
    inlined: bool = False


@dataclass
class Event:
    """One AMP-relevant call in a flow.

    ``kind`` is one of ``backward``, ``scale``, ``scaler_step``, ``scaler_update``,
    ``unscale``, ``opt_step``, ``zero_grad``, ``clip``, ``cast``, ``float``, ``save``,
    ``state_dict``, ``autocast``, ``scaler_new``.
    """

    kind: str
    node: ast.AST
    order: int
    ctx: Context
    obj: str | None = None
    arg: str | None = None
    target: str | None = None
    scaled: bool = False
    framework: bool = False
    loss: ast.expr | None = None
    dtype: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def loops(self) -> tuple[int, ...]:
        """Ids of the loops around the event, outermost first."""
        return self.ctx.loops


def exclusive(a: Event, b: Event) -> bool:
    """Whether two events sit in different arms of the same condition (never both run)."""
    arms = dict(a.ctx.arms)
    return any(test in arms and arms[test] != arm for test, arm in b.ctx.arms)


def _normalise_test(test: ast.expr) -> tuple[str, int]:
    """A text for a condition plus a flip bit, so ``if not x`` and ``if x`` compare equal."""
    flip = 0
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, flip = test.operand, flip ^ 1
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        if isinstance(op, (ast.IsNot, ast.NotEq)):
            cls = ast.Is if isinstance(op, ast.IsNot) else ast.Eq
            test = ast.Compare(test.left, [cls()], test.comparators)
            flip ^= 1
    return ast.dump(test), flip


def modulo_divisor(test: ast.expr) -> str | None:
    """The ``n`` of a gradient-accumulation guard such as ``(i + 1) % n == 0``."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                continue
            return ast.unparse(node.right)
    return None


def _word(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ""


_TEST_CACHE: dict[int, tuple[ast.expr, tuple[str, int, str | None, bool]]] = {}


def _describe_test(test: ast.expr) -> tuple[str, int, str | None, bool]:
    """Key and flip bit of a condition, its accumulation divisor, whether it mentions AMP."""
    cached = _TEST_CACHE.get(id(test))
    if cached is not None and cached[0] is test:
        return cached[1]
    text, flip = _normalise_test(test)
    words = " ".join(_word(n) for n in ast.walk(test))
    described = (text, flip, modulo_divisor(test), bool(_AMP_WORDS.search(" " + words)))
    if len(_TEST_CACHE) > 4096:
        _TEST_CACHE.clear()
    _TEST_CACHE[id(test)] = (test, described)
    return described


def _terminates(stmts: list[ast.stmt]) -> bool:
    """Whether a block ends by leaving (``continue``, ``break``, ``return``, ``raise``)."""
    return bool(stmts) and isinstance(stmts[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise))


def _continue_guard(stmt: ast.stmt) -> str | None:
    """``n`` when ``stmt`` is ``if (i + 1) % n != 0: continue``."""
    if (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and stmt.body
        and isinstance(stmt.body[-1], ast.Continue)
    ):
        return modulo_divisor(stmt.test)
    return None


def _calls_in(node: ast.AST) -> list[ast.Call]:
    """Calls inside ``node`` in evaluation order, not entering lambdas or nested scopes."""
    found: list[ast.Call] = []
    stack: list[ast.AST] = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, ast.Call):
            found.append(cur)
        for child in ast.iter_child_nodes(cur):
            if not isinstance(
                child, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                stack.append(child)
    found.sort(
        key=lambda c: (c.end_lineno or 0, c.end_col_offset or 0, -(c.lineno or 0), -c.col_offset)
    )
    return found


class FlowBuilder:
    """Builds the event list of one unit; see the module docstring."""

    def __init__(
        self, facts: FileFacts, methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    ) -> None:
        self.facts = facts
        self.methods = methods
        self.events: list[Event] = []
        self._stack: list[ast.AST] = []
        self._inlines = 0

    def build(self, body: list[ast.stmt], owner: ast.AST | None = None) -> list[Event]:
        """Walk ``body`` (the unit's statements) and return its events in order."""
        if owner is not None:
            self._stack.append(owner)
        self._block(body, Context())
        return self.events

    # -- statements -------------------------------------------------------------------------
    def _block(self, stmts: list[ast.stmt], ctx: Context) -> None:
        for stmt in stmts:
            self._stmt(stmt, ctx)
            divisor = _continue_guard(stmt)
            if divisor is not None:
                ctx = replace(ctx, accum=divisor)
            # Code after ``if c: ...; continue`` only runs when ``c`` is false: it sits in the
            # other arm, so it never runs together with what the terminated arm did.
            if isinstance(stmt, ast.If):
                text, flip, _, _ = _describe_test(stmt.test)
                if _terminates(stmt.body) and not _terminates(stmt.orelse):
                    ctx = replace(ctx, arms=(*ctx.arms, (text, 1 ^ flip)))
                elif _terminates(stmt.orelse) and not _terminates(stmt.body):
                    ctx = replace(ctx, arms=(*ctx.arms, (text, flip)))
            elif (
                isinstance(stmt, ast.Try)
                and stmt.handlers
                and all(_terminates(h.body) for h in stmt.handlers)
            ):
                ctx = replace(ctx, arms=(*ctx.arms, (f"try{id(stmt)}", 0)))

    def _stmt(self, stmt: ast.stmt, ctx: Context) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            self._exprs(stmt.iter, ctx)
            inner = replace(ctx, loops=(*ctx.loops, id(stmt)), accum=None)
            self._block(stmt.body, inner)
            self._block(stmt.orelse, ctx)
        elif isinstance(stmt, ast.While):
            inner = replace(ctx, loops=(*ctx.loops, id(stmt)), accum=None)
            self._exprs(stmt.test, inner)
            self._block(stmt.body, inner)
            self._block(stmt.orelse, ctx)
        elif isinstance(stmt, ast.If):
            self._exprs(stmt.test, ctx)
            text, flip, divisor, amp_test = _describe_test(stmt.test)
            amp = ctx.amp_conditional or amp_test
            for arm, body in ((0, stmt.body), (1, stmt.orelse)):
                sub = replace(
                    ctx,
                    arms=(*ctx.arms, (text, arm ^ flip)),
                    accum=divisor or ctx.accum,
                    amp_conditional=amp,
                )
                self._block(body, sub)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            inner = ctx
            for item in stmt.items:
                self._exprs(item.context_expr, ctx)
                info = self._autocast_of(item.context_expr)
                if info is not None and not info.disabled:
                    self._emit("autocast", item.context_expr, ctx, extra={"info": info})
                    inner = replace(inner, autocast=info)
            self._block(stmt.body, inner)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            key = f"try{id(stmt)}"
            self._block(stmt.body, replace(ctx, arms=(*ctx.arms, (key, 0))))  # type: ignore[attr-defined]
            for index, handler in enumerate(stmt.handlers, start=1):  # type: ignore[attr-defined]
                self._block(handler.body, replace(ctx, arms=(*ctx.arms, (key, index))))
            self._block(stmt.orelse, ctx)  # type: ignore[attr-defined]
            self._block(stmt.finalbody, ctx)  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.Match):
            self._exprs(stmt.subject, ctx)
            for index, case in enumerate(stmt.cases):
                self._block(case.body, replace(ctx, arms=(*ctx.arms, (f"match{id(stmt)}", index))))
        else:
            target = None
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if len(targets) == 1:
                    target = dotted_key(targets[0])
            value = getattr(stmt, "value", None)
            for call in _calls_in(stmt):
                self._call(call, ctx, target if call is value else None)

    def _exprs(self, node: ast.AST, ctx: Context) -> None:
        for call in _calls_in(node):
            self._call(call, ctx, None)

    def _autocast_of(self, node: ast.expr) -> AutocastInfo | None:
        info = self.facts.resolver.find_autocast(node)
        if info is None:
            key = dotted_key(node)
            if key is not None:
                info = self.facts.autocast_vars.get(key)
        return info

    # -- calls --------------------------------------------------------------------------------
    def _emit(self, kind: str, node: ast.AST, ctx: Context, **fields: object) -> Event:
        event = Event(kind, node, len(self.events), ctx, **fields)  # type: ignore[arg-type]
        self.events.append(event)
        return event

    def _call(self, call: ast.Call, ctx: Context, target: str | None) -> None:
        facts = self.facts
        func = call.func
        qual = facts.imports.qualname(func)
        if qual in CLIP_APIS:
            self._emit("clip", call, ctx, extra={"get_scale": _uses_get_scale(call)})
            return
        if qual == "torch.save":
            self._emit("save", call, ctx)
            return
        if facts.resolver.scaler_ctor(call) is not None:
            self._emit("scaler_new", call, ctx, target=target)
            return
        if isinstance(func, ast.Name):
            callee = facts.functions.get(func.id)
            if callee is not None:
                self._inline(callee, ctx)
            return
        if not isinstance(func, ast.Attribute):
            return
        attr, recv = func.attr, func.value
        obj = dotted_key(recv)
        first = call.args[0] if call.args else None
        arg = None
        if first is not None and attr in ("step", "unscale_"):
            arg = dotted_key(first) or ast.unparse(first)
        if obj == "self" and attr in self.methods:
            self._inline(self.methods[attr], ctx)
        elif attr == "backward":
            if call.args:
                self._emit("backward", call, ctx, obj=obj, framework=True, loss=call.args[0])
            else:
                scaled = facts.is_scaled(recv)
                loss = _scaled_operand(recv, facts) if scaled else recv
                self._emit("backward", call, ctx, obj=obj, scaled=scaled, loss=loss)
        elif attr == "manual_backward":
            self._emit("backward", call, ctx, obj=obj, framework=True)
        elif attr == "scale" and facts.is_scaler(obj):
            self._emit("scale", call, ctx, obj=obj)
        elif attr == "step" and facts.is_scaler(obj):
            self._emit("scaler_step", call, ctx, obj=obj, arg=arg)
        elif attr == "step" and not call.args and facts.is_optimizer(obj):
            self._emit("opt_step", call, ctx, obj=obj)
        elif attr == "update" and facts.is_scaler(obj):
            self._emit("scaler_update", call, ctx, obj=obj)
        elif attr == "unscale_":
            self._emit("unscale", call, ctx, obj=obj, arg=arg)
        elif attr == "zero_grad":
            self._emit("zero_grad", call, ctx, obj=obj)
        elif attr == "state_dict":
            self._emit("state_dict", call, ctx, obj=obj, target=target)
        elif attr in ("half", "bfloat16", "float", "to", "type"):
            self._cast(call, attr, obj, ctx, target)

    def _cast(
        self, call: ast.Call, attr: str, obj: str | None, ctx: Context, target: str | None
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
        kind = "cast" if dtype in ("float16", "bfloat16") else "float"
        self._emit(kind, call, ctx, obj=obj, target=target, dtype=dtype)

    def _inline(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx: Context) -> None:
        if fn in self._stack or len(self._stack) >= _MAX_INLINE_DEPTH:
            return
        if self._inlines >= _MAX_INLINES_PER_UNIT or not self.facts.is_interesting(fn):
            return
        self._inlines += 1
        self._stack.append(fn)
        try:
            self._block(fn.body, replace(ctx, inlined=True))
        finally:
            self._stack.pop()


def _uses_get_scale(call: ast.Call) -> bool:
    """Whether a clip call's arguments use ``scaler.get_scale()`` (clipping at a scaled norm)."""
    for arg in [*call.args, *(kw.value for kw in call.keywords)]:
        for node in ast.walk(arg):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get_scale", "_get_scale_async")
            ):
                return True
    return False


def _scaled_operand(node: ast.expr, facts: FileFacts) -> ast.expr:
    """The loss inside ``scaler.scale(loss)`` (or the variable holding a scaled loss)."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "scale"
            and sub.args
        ):
            return sub.args[0]
    return node


def is_optimizer_key(facts: FileFacts, key: str | None) -> bool:
    """Whether ``key`` names an optimizer (constructed, passed to the scaler, or by name)."""
    return key is not None and (key in facts.optimizer_keys or is_optimizer_name(key))

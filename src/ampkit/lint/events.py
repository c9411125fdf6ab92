"""The vocabulary of a flow: :class:`Event` (one AMP-relevant call) and its :class:`Context`.

The context says where an event runs: inside which loops (an event in a loop that has
already ended never meets an event of the next loop), in which arm of which condition
(events in different arms of one condition never run together), under which autocast
region, and behind which gradient-accumulation guard.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ampkit.lint.names import AutocastInfo, dotted_key

__all__ = [
    "Context",
    "Event",
    "TestInfo",
    "compatible",
    "describe_test",
    "names_read",
    "exclusive",
    "modulo_divisor",
    "reset_counter",
]

_AMP_WORDS = re.compile(
    r"(^|[^a-z])amp|scaler|fp16|half|mixed|precision|autocast|float16", re.IGNORECASE
)


@dataclass(frozen=True)
class Context:
    """Where an event happens.

    ``loops`` are the ids of the enclosing loops that really iterate (outermost first);
    ``base`` is how many of them belong to callers (events of an inlined function see the
    loops of the code that called it, but its own loops start at ``loops[base:]``).
    """

    loops: tuple[int, ...] = ()
    arms: tuple[tuple[str, int], ...] = ()
    autocast: AutocastInfo | None = None
    accum: str | None = None
    amp_conditional: bool = False
    inlined: bool = False
    base: int = 0
    #: for the events of an inlined call: the call in the unit's own code that led there,
    #: and the autocast region open at that call (``with autocast(): helper(batch)``)
    site: ast.AST | None = None
    site_autocast: AutocastInfo | None = None
    #: inside ``torch.no_grad()`` / ``torch.inference_mode()``: nothing here is differentiated
    grad_free: bool = False


@dataclass
class Event:
    """One AMP-relevant call in a flow.

    ``kind`` is one of ``backward``, ``scale``, ``scaler_step``, ``scaler_update``,
    ``unscale``, ``opt_step``, ``zero_grad``, ``clip``, ``cast``, ``float``, ``save``,
    ``state_dict``, ``autocast``, ``scaler_new``, ``grad_rescale``, ``framework_unscale``.
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

    @property
    def own_loops(self) -> tuple[int, ...]:
        """The loops of the function the event is written in (not those of its callers)."""
        return self.ctx.loops[self.ctx.base :]

    @property
    def line(self) -> int:
        """The source line of the event's call."""
        return int(getattr(self.node, "lineno", 0))


def exclusive(a: Event, b: Event) -> bool:
    """Whether two events sit in different arms of the same condition (never both run)."""
    if not a.ctx.arms or not b.ctx.arms:
        return False
    arms = dict(a.ctx.arms)
    return any(test in arms and arms[test] != arm for test, arm in b.ctx.arms)


def compatible(a: Event, b: Event) -> bool:
    """Whether two events can run in the same iteration: one's loops enclose the other's.

    Events in two loops that follow each other (a warm-up loop, then the training loop)
    never belong to the same training step.
    """
    short, long = (a.loops, b.loops) if len(a.loops) <= len(b.loops) else (b.loops, a.loops)
    return long[: len(short)] == short


def modulo_divisor(test: ast.expr) -> str | None:
    """The ``n`` of a gradient-accumulation guard such as ``(i + 1) % n == 0``."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                continue
            return ast.unparse(node.right)
    return None


def reset_counter(stmt: ast.If) -> tuple[str, str] | None:
    """``(counter, n)`` of a guard that steps when a counter reaches ``n`` and restarts it:
    ``if count >= n: ...; count = 0`` (alone, or in an ``and``/``or`` with other tests such as
    the epoch's last batch)."""
    test = stmt.test
    operands = test.values if isinstance(test, ast.BoolOp) else [test]
    candidates: list[tuple[str, ast.expr]] = []
    for operand in operands:
        if not (
            isinstance(operand, ast.Compare)
            and len(operand.ops) == 1
            and isinstance(operand.ops[0], (ast.GtE, ast.Eq))
        ):
            continue
        counter, limit = dotted_key(operand.left), operand.comparators[0]
        if counter is None or (isinstance(limit, ast.Constant) and limit.value in (0, 1)):
            continue
        candidates.append((counter, limit))
    if not candidates:
        return None  # (most conditions: the body is not walked)
    resets = {
        dotted_key(target)
        for node in _own_nodes(stmt.body)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and node.value.value == 0
        and not isinstance(node.value.value, bool)
        for target in node.targets
    }
    for counter, limit in candidates:
        if counter in resets:
            return counter, ast.unparse(limit)
    return None


def _own_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``body``, nested functions and classes left out."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


@dataclass(frozen=True)
class TestInfo:
    """A condition as the rules see it.

    ``key`` and ``flip`` identify it (``if not x`` and ``if x`` share the key, flipped),
    ``divisor`` is its accumulation count (``n`` in ``i % n``), ``amp`` whether its words
    mention mixed precision, ``names`` the variables it reads.
    """

    key: str
    flip: int
    divisor: str | None
    amp: bool
    names: frozenset[str]


def _word(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ""


def _normalise(test: ast.expr) -> tuple[str, int]:
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


def names_read(test: ast.expr) -> frozenset[str]:
    """The names and attribute chains an expression reads (``a``, ``self.hparams.n``)."""
    found: set[str] = set()
    for node in ast.walk(test):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            parts: list[str] = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                found.add(".".join([value.id, *reversed(parts)]))
    return frozenset(found)


def describe_test(test: ast.expr) -> TestInfo:
    """Describe a condition (see :class:`TestInfo`)."""
    key, flip = _normalise(test)
    words = " ".join(_word(n) for n in ast.walk(test))
    return TestInfo(
        key, flip, modulo_divisor(test), bool(_AMP_WORDS.search(" " + words)), names_read(test)
    )

"""Where names are bound in a file, and under which conditions (for :mod:`ampkit.lint.pairing`).

:func:`read_statements` records, for every binding of a name or attribute chain
(``scaler = ...``, ``self.amp_dtype = ...``), its scope (the function it is written in, or
``None`` at module level), its position and the ``if`` conditions around it, and for every
statement its scope and conditions; loop targets, ``with ... as`` names and augmented
assignments are recorded as bindings whose value is not followed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ampkit.lint.names import dotted_key

__all__ = [
    "END",
    "STATEMENT_TYPES",
    "Binding",
    "Bindings",
    "Member",
    "atom_name",
    "constants_of",
    "field_key",
    "item_key",
    "member_of",
    "parameter_names",
    "parse_key",
    "position",
    "read_statements",
]


@dataclass(frozen=True)
class Binding:
    """One binding of ``key``: where (scope, position), its value, and the ``if``
    conditions (test, arm taken) around it."""

    key: str
    pos: tuple[int, int]
    value: ast.expr | None  # None: bound by something not followed (a loop target, ...)
    tests: tuple[tuple[ast.expr, bool], ...]
    scope: ast.AST | None


class Bindings:
    """The bindings of one file (the linted one, or a module of the tree read for a name it
    exports); ``linted`` says whether its names resolve through the linted file's imports."""

    def __init__(self, linted: bool) -> None:
        self.linted = linted
        self.by_key: dict[str, list[Binding]] = {}
        #: statement id -> (scope, the conditions around it)
        self.places: dict[int, tuple[ast.AST | None, tuple[tuple[ast.expr, bool], ...]]] = {}
        #: function id -> the function it is defined in (a closure reads that one's names)
        self.enclosing: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def add(self, binding: Binding) -> None:
        """Record ``binding`` (bindings are added in source order)."""
        self.by_key.setdefault(binding.key, []).append(binding)


#: a position after every statement (the end of a scope)
END = (1 << 30, 0)


def parameter_names(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names a function's parameters bind (positional and keyword-only)."""
    args = function.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


def position(node: ast.AST) -> tuple[int, int]:
    """``(line, column)`` of a node."""
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def read_statements(
    source: Bindings,
    body: list[ast.stmt],
    scope: ast.AST | None,
    tests: tuple[tuple[ast.expr, bool], ...],
    module_only: bool = False,
) -> None:
    """Record the bindings of ``body`` (and of the functions in it, unless ``module_only``)."""
    for stmt in body:
        source.places[id(stmt)] = (scope, tests)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not module_only:
                inner = stmt if not isinstance(stmt, ast.ClassDef) else scope
                if inner is stmt and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    source.enclosing[id(stmt)] = scope
                read_statements(source, stmt.body, inner, () if inner is stmt else tests)
        elif isinstance(stmt, ast.If):
            for arm, polarity in ((stmt.body, True), (stmt.orelse, False)):
                read_statements(source, arm, scope, (*tests, (stmt.test, polarity)), module_only)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                item = item_key(target)
                if item is not None:
                    # ``kwargs["dtype"] = ...``: a key of a dict passed as ``**kwargs``
                    source.add(Binding(item, position(stmt), stmt.value, tests, scope))
                    continue
                key = dotted_key(target)
                value = stmt.value if key is not None else None
                for bound in [target] if key is not None else _bound(target):
                    name = dotted_key(bound)
                    if name is not None:
                        source.add(Binding(name, position(stmt), value, tests, scope))
        else:
            for opaque in _targets(stmt):
                source.add(Binding(opaque, position(stmt), None, tests, scope))
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list):
                    stmts = [s for s in inner if isinstance(s, ast.stmt)]
                    stmts += [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body]
                    read_statements(source, stmts, scope, tests, module_only)


def item_key(node: ast.AST) -> str | None:
    """``'kwargs["dtype"]'`` for ``kwargs["dtype"]`` (a string key of a name or attribute
    chain), else ``None``."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = dotted_key(node.value)
        if base is not None and isinstance(node.slice.value, str):
            return f"{base}[{node.slice.value!r}]"
    return None


def _bound(target: ast.expr) -> list[ast.expr]:
    return [n for n in ast.walk(target) if isinstance(n, (ast.Name, ast.Attribute))]


def _targets(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.AugAssign):
        key = dotted_key(stmt.target)
        return [key] if key is not None else []
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [k for n in _bound(stmt.target) if (k := dotted_key(n)) is not None]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [
            k
            for item in stmt.items
            if item.optional_vars is not None
            for n in _bound(item.optional_vars)
            if (k := dotted_key(n)) is not None
        ]
    return []


def atom_name(node: ast.AST) -> str:
    """The name of an atom: the last part of a name or attribute chain, the key of a field
    looked up by a string (``params["use_amp"]`` is `use_amp`, as ``cfg.use_amp`` is), else
    its text."""
    key = dotted_key(node)
    if key is not None:
        return key.rsplit(".", 1)[-1]
    field = field_key(node)
    if field is not None:
        return field
    return ast.unparse(node)


def field_key(node: ast.AST) -> str | None:
    """``"use_amp"`` for ``params["use_amp"]`` / ``self.cfg["use_amp"]`` (a string key of
    a name or attribute chain), else ``None``."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
        and node.slice.value.isidentifier()
        and dotted_key(node.value) is not None
    ):
        return node.slice.value
    return None


#: every concrete statement class of :mod:`ast`
STATEMENT_TYPES = tuple(
    cls
    for cls in vars(ast).values()
    if isinstance(cls, type) and issubclass(cls, ast.stmt) and cls is not ast.stmt
)


def parse_key(key: str) -> ast.expr:
    """The expression a dotted key spells (``self.scaler``)."""
    try:
        return ast.parse(key, mode="eval").body
    except SyntaxError:
        return ast.Name(key)


@dataclass(frozen=True)
class Member:
    """An enum member compared with (``Precision.FP16``): a constant known by its text."""

    text: str

    def __repr__(self) -> str:
        return self.text


def member_of(node: ast.AST) -> Member | None:
    """``Precision.FP16`` (a capitalised name, an upper-case attribute) as a :class:`Member`."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id[:1].isupper()
        and node.attr.isupper()
    ):
        return Member(f"{node.value.id}.{node.attr}")
    return None


def constants_of(node: ast.expr) -> Iterator[object]:
    """The constants a node is (``"bf16"``, ``Precision.BF16``) or lists (``("bf16",
    "fp16")``)."""
    member = member_of(node)
    if isinstance(node, ast.Constant):
        yield node.value
    elif member is not None:
        yield member
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for elt in node.elts:
            if isinstance(elt, ast.Constant):
                yield elt.value
            elif member_of(elt) is not None:
                yield member_of(elt)

"""One pass over a parsed file that collects what the analysis needs from every node."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

__all__ = ["Walk", "walk_tree"]

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def walk_tree(tree: ast.Module) -> Walk:
    """One pass over the tree: every node (grouped by type), the innermost function each is
    written in, and the calls of each statement (its own expressions, not nested statements
    or lambdas) in evaluation order."""
    walk = Walk()
    nodes, owners, calls, by_type = walk.nodes, walk.owners, walk.calls, walk.by_type
    stack: list[tuple[ast.AST, FunctionNode | None, ast.AST | None]] = [(tree, None, None)]
    pop, push = stack.pop, stack.append
    while stack:
        node, owner, stmt = pop()
        kind = type(node)
        nodes.append(node)
        owners.append(owner)
        group = by_type.get(kind)
        if group is None:
            by_type[kind] = [node]
        else:
            group.append(node)
        if kind is ast.Call:
            if stmt is not None:
                found = calls.get(id(stmt))
                if found is None:
                    calls[id(stmt)] = [node]  # type: ignore[list-item]
                else:
                    found.append(node)  # type: ignore[arg-type]
        elif kind in _STATEMENTS:
            stmt = node
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                owner = node  # type: ignore[assignment]
        elif kind is ast.Lambda:
            stmt = None
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                push((value, owner, stmt))
            elif type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        push((item, owner, stmt))
    for found in calls.values():
        found.sort(key=_evaluation_order)
    return walk


_STATEMENTS = frozenset(
    cls for cls in vars(ast).values() if isinstance(cls, type) and issubclass(cls, ast.stmt)
)


@dataclass
class Walk:
    """What :func:`_walk` collects."""

    nodes: list[ast.AST] = field(default_factory=list)
    owners: list[FunctionNode | None] = field(default_factory=list)
    calls: dict[int, list[ast.Call]] = field(default_factory=dict)
    by_type: dict[type, list[ast.AST]] = field(default_factory=dict)


def _evaluation_order(call: ast.Call) -> tuple[int, int, int, int]:
    """Inner calls end first: ``scaler.scale(loss)`` before its ``.backward()``."""
    return (call.end_lineno or 0, call.end_col_offset or 0, -(call.lineno or 0), -call.col_offset)

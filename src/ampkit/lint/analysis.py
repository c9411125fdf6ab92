"""One analysed file: its :class:`~ampkit.lint.facts.FileFacts` and the flow of every unit.

:class:`FileAnalysis` builds one event flow per unit (the module body and every function or
method, following calls of same-file functions and ``self`` methods) for the rules.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ampkit.lint.facts import FileFacts, FunctionNode
from ampkit.lint.findings import Finding, Fix, Severity
from ampkit.lint.flow import Event, FlowBuilder
from ampkit.lint.source import SourceText

__all__ = ["FileAnalysis", "FileFacts", "Unit"]


def _methods(
    cls: ast.ClassDef, classes: dict[str, ast.ClassDef], depth: int = 0
) -> dict[str, FunctionNode]:
    """Methods of ``cls``, including those inherited from base classes defined in the file."""
    table: dict[str, FunctionNode] = {}
    if depth < 4:
        for base in reversed(cls.bases):
            parent = classes.get(base.id) if isinstance(base, ast.Name) else None
            if parent is not None and parent is not cls:
                table.update(_methods(parent, classes, depth + 1))
    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            table[item.name] = item
    return table


@dataclass
class Unit:
    """A function, method or module body with its flow of events."""

    node: ast.AST
    events: list[Event]
    cls: ast.ClassDef | None = None
    group: int = 0

    def of(self, *kinds: str) -> list[Event]:
        """The events of the given kinds, in order."""
        return [e for e in self.events if e.kind in kinds]


@dataclass
class FileAnalysis:
    """Everything the rules need about one parsed file."""

    tree: ast.Module
    source: SourceText
    path: str
    facts: FileFacts = field(init=False)
    units: list[Unit] = field(init=False)

    def __post_init__(self) -> None:
        self.nodes: list[ast.AST] = list(ast.walk(self.tree))
        self._parents: dict[int, ast.AST] | None = None
        self.facts = FileFacts(self.tree, self.nodes)
        self.units = []
        module_unit = Unit(self.tree, FlowBuilder(self.facts, {}).build(self.tree.body), None, 0)
        self.units.append(module_unit)
        owners: dict[int, ast.ClassDef] = {}
        classes: dict[str, ast.ClassDef] = {}
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        owners[id(item)] = node
        method_tables: dict[int, dict[str, FunctionNode]] = {}
        for node in self.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                cls = owners.get(id(node))
                methods: dict[str, FunctionNode] = {}
                if cls is not None:
                    if id(cls) not in method_tables:
                        method_tables[id(cls)] = _methods(cls, classes)
                    methods = method_tables[id(cls)]
                events = FlowBuilder(self.facts, methods).build(node.body, node)
                self.units.append(Unit(node, events, cls, id(cls) if cls is not None else 0))

    def parent(self, node: ast.AST) -> ast.AST | None:
        """The node that directly contains ``node`` (computed on first use)."""
        if self._parents is None:
            self._parents = {id(c): p for p in self.nodes for c in ast.iter_child_nodes(p)}
        return self._parents.get(id(node))

    def group_events(self, group: int, *kinds: str) -> list[Event]:
        """Events of the given kinds in every unit of a class (or of the module, group 0)."""
        return [e for u in self.units if u.group == group for e in u.of(*kinds)]

    def finding(
        self, code: str, severity: Severity, node: ast.AST, message: str, fix: Fix | None = None
    ) -> Finding:
        """A finding located at ``node``."""
        line, column = self.source.position(
            getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        )
        return Finding(self.path, line, column, code, severity, message, fix)

"""One analysed file: its :class:`~ampkit.lint.facts.FileFacts` and the flow of every unit.

:class:`FileAnalysis` builds one event flow per unit (the module body and every function or
method, following calls of same-file functions and ``self`` methods) for the rules.
"""

from __future__ import annotations

import ast
import bisect
from dataclasses import dataclass, field

from ampkit.lint.events import Event, compatible, exclusive
from ampkit.lint.facts import FileFacts, FunctionNode
from ampkit.lint.findings import Finding, Fix, Severity
from ampkit.lint.flow import FlowBuilder
from ampkit.lint.inherit import Methods, class_methods
from ampkit.lint.pairing import Pairing
from ampkit.lint.project import ProjectView
from ampkit.lint.source import SourceText
from ampkit.lint.walk import walk_tree

__all__ = ["FileAnalysis", "FileFacts", "Unit"]


def _local_functions(body: list[ast.stmt]) -> dict[str, FunctionNode]:
    """Functions defined inside a body (not inside nested scopes), by name."""
    found: dict[str, FunctionNode] = {}
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(node.name, node)
        elif isinstance(node, ast.stmt) and not isinstance(node, ast.ClassDef):
            stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt))
    return found


class Unit:
    """A function, method or module body with its flow of events, indexed for the rules.

    The queries only pair events that can belong to the same iteration (see
    :func:`~ampkit.lint.events.compatible`), so a script with hundreds of loops costs each
    event a look at its own loop, not at the whole file.
    """

    def __init__(
        self,
        node: ast.AST,
        builder: FlowBuilder | None,
        cls: ast.ClassDef | None = None,
        group: int = 0,
    ) -> None:
        self.node = node
        self.cls = cls
        self.group = group
        self.events: list[Event] = builder.events if builder is not None else []
        self.loop_bound: dict[int, set[str]] = builder.loop_bound if builder is not None else {}
        self.test_names = builder.test_names if builder is not None else {}
        self.test_nodes = builder.test_nodes if builder is not None else {}
        self._kinds: dict[str, list[Event]] = {}
        self._tops: dict[tuple[int | None, str], list[Event]] = {}
        for event in self.events:
            self._kinds.setdefault(event.kind, []).append(event)
            top = event.loops[0] if event.loops else None
            self._tops.setdefault((top, event.kind), []).append(event)
        self._orders = {k: [e.order for e in v] for k, v in self._kinds.items()}
        self._cache: dict[tuple[str, ...], list[Event]] = {}
        self._loops: dict[tuple[str, ...], set[int]] = {}

    def of(self, *kinds: str) -> list[Event]:
        """The events of the given kinds, in order."""
        if len(kinds) == 1:
            return self._kinds.get(kinds[0], [])
        found = self._cache.get(kinds)
        if found is None:
            found = sorted((e for k in kinds for e in self._kinds.get(k, ())), key=_order)
            self._cache[kinds] = found
        return found

    def related(self, event: Event, *kinds: str) -> list[Event]:
        """Events of ``kinds`` that can run in the same iteration as ``event``, in order."""
        if not event.loops:
            return self.of(*kinds)
        top = event.loops[0]
        found = [e for k in kinds for t in (top, None) for e in self._tops.get((t, k), ())]
        found.sort(key=_order)
        return [e for e in found if compatible(e, event)]

    def between(self, first: Event, last: Event, *kinds: str) -> list[Event]:
        """Events of ``kinds`` that run after ``first`` and before ``last`` whenever both run:
        strictly between them in the flow and in no arm that excludes either."""
        found: list[Event] = []
        for kind in kinds:
            orders = self._orders.get(kind)
            if not orders:
                continue
            lo = bisect.bisect_right(orders, first.order)
            hi = bisect.bisect_left(orders, last.order)
            found.extend(
                e
                for e in self._kinds[kind][lo:hi]
                if not exclusive(e, first) and not exclusive(e, last)
            )
        return found

    def condition(self, arm_key: str) -> str:
        """The source text of a condition, for messages."""
        node = self.test_nodes.get(arm_key)
        return ast.unparse(node) if node is not None else "a condition"

    def loops_with(self, *kinds: str) -> set[int]:
        """Ids of the loops that contain at least one event of ``kinds``."""
        found = self._loops.get(kinds)
        if found is None:
            found = self._loops[kinds] = {loop for e in self.of(*kinds) for loop in e.loops}
        return found

    def varies_in(self, arm_key: str, loop: int, ignoring: str | None = None) -> bool:
        """Whether a condition reads a variable that ``loop`` rebinds (a counter, the loop
        target, a flag set inside it), so it can be true in one iteration and false in the next.
        ``ignoring`` is a variable whose rebinding does not count (a scaler the loop replaces
        by a fresh one is no less there for it)."""
        names = self.test_names.get(arm_key)
        bound = self.loop_bound.get(loop)
        return bool(names and bound and (names & bound) - {ignoring})


def _order(event: Event) -> int:
    return event.order


@dataclass
class FileAnalysis:
    """Everything the rules need about one parsed file."""

    tree: ast.Module
    source: SourceText
    path: str
    project: ProjectView | None = None
    facts: FileFacts = field(init=False)
    units: list[Unit] = field(init=False)

    def __post_init__(self) -> None:
        walk = walk_tree(self.tree)
        self.nodes = walk.nodes
        self._parents: dict[int, ast.AST] | None = None
        self._pairing: Pairing | None = None
        self._groups: dict[tuple[int, tuple[str, ...]], list[Event]] = {}
        self.facts = FileFacts(self.tree, walk, self.project)
        owners: dict[int, ast.ClassDef] = {}
        classes: dict[str, ast.ClassDef] = {}
        functions: list[FunctionNode] = []
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        owners[id(item)] = node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append(node)
        method_tables: dict[int, Methods] = {}
        for klass in {id(c): c for c in owners.values()}.values():
            table = method_tables[id(klass)] = class_methods(klass, classes, self.facts)
            # a call of a method inherited from another file is worth following when that
            # method makes AMP-relevant calls there
            self.facts.inherited.update(
                name
                for name, fn in table.table.items()
                if id(fn) in table.written_in and table.written_in[id(fn)].is_interesting(fn)
            )
        # each method's class table, for a method of another class followed from a call
        tables = {fn_id: method_tables[id(cls)] for fn_id, cls in owners.items()}
        module = FlowBuilder(self.facts, {}, _local_functions(self.tree.body), tables=tables)
        module.build(self.tree.body)
        self.units = [Unit(self.tree, module, None, 0)]
        for fn in functions:
            cls = owners.get(id(fn))
            group = id(cls) if cls is not None else 0
            if not self.facts.has_events(fn):
                continue
            methods = method_tables[id(cls)] if cls is not None else Methods()
            builder = FlowBuilder(
                self.facts, methods.table, _local_functions(fn.body), methods.written_in, tables
            )
            builder.build(fn.body, fn)
            self.units.append(Unit(fn, builder, cls, group))

    @property
    def pairing(self) -> Pairing:
        """The flag and config pairings of the file (:mod:`ampkit.lint.pairing`), built on
        first use."""
        if self._pairing is None:
            self._pairing = Pairing(self.tree, self.facts, self.project)
        return self._pairing

    @property
    def no_scaler_anywhere(self) -> bool:
        """Whether neither this file nor any other file of the linted tree builds, names or
        uses a GradScaler."""
        facts = self.facts
        if facts.any_scaler or facts.scaler_keys or facts.scaler_named:
            return False
        return self.project is None or not self.project.any_scaler

    @property
    def framework_evidence(self) -> dict[str, set[str]]:
        """What the framework constructors seen say about loss scaling (see
        :mod:`ampkit.lint.frameworks`)."""
        if self.project is None:
            return self.facts.framework_evidence
        merged = {k: set(v) for k, v in self.project.evidence.items()}
        for family, seen in self.facts.framework_evidence.items():
            merged.setdefault(family, set()).update(seen)
        return merged

    @property
    def set_keywords(self) -> set[str]:
        """Keyword names some call of the linted code (this file, or the tree) passes a
        possibly true value."""
        if self.project is None:
            return self.facts.set_keywords
        return self.facts.set_keywords | self.project.set_keywords

    def positional_count(self, callee: str) -> int:
        """The most positional arguments a call of the linted code passes ``callee``."""
        count = self.facts.positional.get(callee, -1)
        if self.project is not None:
            count = max(count, self.project.positional.get(callee, -1))
        return count

    def flag_off(self, flag: ast.expr | None, node: ast.AST) -> bool:
        """Whether ``flag`` (an ``enabled=`` written at ``node``) is provably false: a
        parameter of the enclosing function that defaults to ``False``, is never rebound
        there, and that no call of the linted code can set (by keyword, by position or
        through ``*args``/``**kwargs``)."""
        if not isinstance(flag, ast.Name):
            return False
        fn = self.facts.owner_of(node)
        if fn is None:
            return False
        args = fn.args
        positional = [*args.posonlyargs, *args.args]
        defaults: dict[str, ast.expr] = {
            a.arg: d
            for a, d in zip(
                positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
            )
        }
        defaults.update(
            {
                a.arg: d
                for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                if d is not None
            }
        )
        default = defaults.get(flag.id)
        if not (isinstance(default, ast.Constant) and default.value is False):
            return False
        for sub in ast.walk(fn):
            if (
                isinstance(sub, ast.Name)
                and sub.id == flag.id
                and not isinstance(sub.ctx, ast.Load)
            ):
                return False
        if flag.id in self.set_keywords:
            return False
        names = [a.arg for a in positional]
        if flag.id in names:
            index = names.index(flag.id)
            if names and names[0] in ("self", "cls"):
                index -= 1
            if self.positional_count(fn.name) > index:
                return False
        return True

    def of_type(self, *kinds: type) -> list[ast.AST]:
        """The nodes of the given ast types (in no particular order)."""
        return [n for kind in kinds for n in self.facts.by_type.get(kind, ())]

    def parent(self, node: ast.AST) -> ast.AST | None:
        """The node that directly contains ``node`` (computed on first use)."""
        if self._parents is None:
            self._parents = {id(c): p for p in self.nodes for c in ast.iter_child_nodes(p)}
        return self._parents.get(id(node))

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function holding ``node`` (the module at top level)."""
        current = self.parent(node)
        while current is not None and not isinstance(
            current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        ):
            current = self.parent(current)
        return current if current is not None else self.tree

    def group_events(self, group: int, *kinds: str) -> list[Event]:
        """Events of the given kinds in every unit of a class (or of the module, group 0)."""
        key = (group, kinds)
        found = self._groups.get(key)
        if found is None:
            found = [e for u in self.units if u.group == group for e in u.of(*kinds)]
            self._groups[key] = found
        return found

    def finding(
        self, code: str, severity: Severity, node: ast.AST, message: str, fix: Fix | None = None
    ) -> Finding:
        """A finding located at ``node``."""
        line, column = self.source.position(
            getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        )
        return Finding(self.path, line, column, code, severity, message, fix)

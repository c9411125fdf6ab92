"""The evaluator behind :mod:`ampkit.lint.pairing`: runs the assignments that decide a
question under every combination of the free values they read.

A name is judged by the binding that reaches the place it is read, in its own scope; a value
the code does not decide is a free *atom* with a small domain (an option's choices, the
constants the file compares it with, true and false); :meth:`Solver.solve` tries the
combinations and returns an :class:`Answer` (see the pairing module for the rules).
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ampkit.lint.discovery import MAX_FILE_BYTES, read_source
from ampkit.lint.facts import FileFacts
from ampkit.lint.names import BF16, DTYPES, dotted_key
from ampkit.lint.project import ProjectView, note_dtype_keywords, option_summary
from ampkit.lint.scopes import (
    END,
    STATEMENT_TYPES,
    Binding,
    Bindings,
    atom_name,
    constants_of,
    field_key,
    member_of,
    parameter_names,
    parse_key,
    position,
    read_statements,
)

__all__ = [
    "OTHER",
    "Answer",
    "Dtype",
    "MISSING",
    "Need",
    "ScalerValue",
    "Solver",
    "Table",
    "Unknown",
    "Where",
    "arm_tests",
    "truth",
]

_MAX_RUNS = 96
_MAX_DEPTH = 24


class _Other:
    """A value of a free atom other than every constant it is compared with."""

    def __repr__(self) -> str:
        return "another value"


OTHER = _Other()


@dataclass(frozen=True)
class Dtype:
    name: str


@dataclass(frozen=True)
class ScalerValue:
    enabled: bool


@dataclass(frozen=True)
class Table:
    """A dict literal: its constant keys and value expressions, where it is written."""

    entries: tuple[tuple[object, ast.expr], ...]
    where: Where


class Unknown(Exception):
    """A value the question needs and cannot follow."""


class Need(Exception):
    def __init__(self, atom: str, domain: tuple[object, ...]) -> None:
        super().__init__(atom)
        self.atom = atom
        self.domain = domain


@dataclass(frozen=True)
class Where:
    """A place code is read at: its source, scope (function, ``None`` for module level) and
    position (statement line and column)."""

    source: Bindings
    scope: ast.AST | None
    pos: tuple[int, int]
    #: the conditions around the statement (only for places of events)
    tests: tuple[tuple[ast.expr, bool], ...] = ()


@dataclass(frozen=True)
class Answer:
    """``verdict`` is ``bad``, ``never`` or ``unknown``; ``condition`` names the values that
    make it bad (empty when nothing is free)."""

    verdict: str
    condition: str = ""

    def when(self) -> str:
        """`` when `x` is true`` (or empty), to append to a message."""
        return f" when {self.condition}" if self.condition else ""


def _show(atom: str, value: object) -> str:
    if value is True:
        return f"`{atom}` is true"
    if value is False:
        return f"`{atom}` is false"
    if value is OTHER:
        return f"`{atom}` is another value"
    if isinstance(value, Dtype):
        return f"`{atom}` is torch.{value.name}"
    return f"`{atom}` is {value!r}"


class Solver:
    """The evaluation state of one analysed file; :class:`~ampkit.lint.pairing.Pairing`
    asks its questions through it."""

    def __init__(self, tree: ast.Module, facts: FileFacts, project: ProjectView | None) -> None:
        self.facts = facts
        self.project = project
        self.home = Bindings(True)
        read_statements(self.home, tree.body, None, ())
        self._stmt_of: dict[int, ast.stmt] | None = None
        self.constants_of: dict[str, set[object]] | None = None
        self._classes: dict[int, ast.ClassDef] = {}
        for node in self.facts.of_type(ast.ClassDef):
            for item in node.body:  # type: ignore[attr-defined]
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self._classes[id(item)] = node  # type: ignore[assignment]
        options = option_summary(
            self.facts.of_type(ast.Call),  # type: ignore[arg-type]
            self.facts.of_type(ast.AnnAssign),  # type: ignore[arg-type]
        )
        self.options = dict(project.options) if project is not None else {}
        self.options.update(options)
        self._dtype_values: dict[str, set[str]] | None = None
        #: names that range over the torch dtypes for the question being solved
        self._dtype_atoms: frozenset[str] = frozenset()
        # one run's state
        self._assignment: dict[str, object] = {}
        self._read: list[str] = []
        #: atoms read to decide the pairing itself, not only whether a place is reached
        #: (``if torch.cuda.is_available():``); a message names these when there are any
        self._decided: set[str] = set()
        self._reaching = 0
        self._memo: dict[tuple[int, str, int, tuple[int, int], bool], object] = {}
        self._active: set[tuple[int, str, int, tuple[int, int], bool]] = set()

    def solve(self, question: Callable[[], bool]) -> Answer:
        stack: list[dict[str, object]] = [{}]
        runs = 0
        unknown = False
        while stack:
            runs += 1
            if runs > _MAX_RUNS:
                return Answer("unknown")
            assignment = stack.pop()
            outcome = self._run(question, assignment)
            if isinstance(outcome, Need):
                for value in reversed(outcome.domain):
                    stack.append({**assignment, outcome.atom: value})
            elif outcome is None:
                unknown = True
            elif outcome:
                return Answer("bad", self._condition(question, assignment))
        return Answer("unknown" if unknown else "never")

    def _run(self, question: Callable[[], bool], assignment: dict[str, object]) -> object:
        """True/False, ``None`` (unknown) or the :class:`Need` of an unassigned atom."""
        self._assignment = assignment
        self._read = []
        self._decided = set()
        self._memo = {}
        self._active = set()
        try:
            return bool(question())
        except Need as need:
            return need
        except (Unknown, RecursionError):
            return None

    def _condition(self, question: Callable[[], bool], assignment: dict[str, object]) -> str:
        """The atoms of a bad assignment that matter. An atom is left out when no value of
        it, together with any values of the atoms already left out, is known to be fine."""
        self._run(question, assignment)
        read = list(dict.fromkeys(self._read))
        dropped: list[str] = []
        kept: list[str] = []
        for atom in read:
            free = [*dropped, atom]
            combos: list[dict[str, object]] = [{}]
            for name in free:
                combos = [{**c, name: v} for c in combos for v in self._domain_of(name)]
                if len(combos) > _MAX_RUNS // 4:
                    break
            if len(combos) <= _MAX_RUNS // 4 and not any(
                self._some_fine(question, {**assignment, **combo}) for combo in combos
            ):
                dropped.append(atom)
            else:
                kept.append(atom)
        self._run(question, assignment)
        decided = [a for a in kept if a in self._decided]
        return " and ".join(_show(a, assignment[a]) for a in decided or kept)

    def _some_fine(self, question: Callable[[], bool], assignment: dict[str, object]) -> bool:
        """Whether some completion of ``assignment`` is known to be fine (the question
        false), the atoms it does not assign taking each of their values."""
        stack = [assignment]
        runs = 0
        while stack and runs < _MAX_RUNS // 4:
            runs += 1
            current = stack.pop()
            outcome = self._run(question, current)
            if isinstance(outcome, Need):
                stack.extend({**current, outcome.atom: v} for v in outcome.domain)
            elif outcome is False:
                return True
        return False

    # -- places --------------------------------------------------------------------------------
    def _statement(self, node: ast.AST) -> ast.stmt | None:
        if isinstance(node, ast.stmt):
            return node
        if self._stmt_of is None:
            statements = [
                s for s in self.facts.of_type(*STATEMENT_TYPES) if isinstance(s, ast.stmt)
            ]
            self._stmt_of = {
                id(call): stmt for stmt in statements for call in self.facts.calls.get(id(stmt), ())
            }
            for stmt in statements:
                for sub in ast.iter_child_nodes(stmt):
                    if isinstance(sub, ast.expr):
                        self._stmt_of.setdefault(id(sub), stmt)  # type: ignore[arg-type]
                if isinstance(stmt, (ast.With, ast.AsyncWith)):
                    for item in stmt.items:
                        self._stmt_of.setdefault(id(item.context_expr), stmt)
        return self._stmt_of.get(id(node))

    def _where(self, node: ast.AST) -> Where | None:
        stmt = self._statement(node)
        if stmt is None or id(stmt) not in self.home.places:
            return None
        scope, tests = self.home.places[id(stmt)]
        return Where(self.home, scope, position(stmt), tests)

    def _reached(self, where: Where) -> bool:
        """Whether the conditions around a statement of the linted file hold."""
        self._reaching += 1
        try:
            return self._tests_hold(where.tests, where)
        finally:
            self._reaching -= 1

    def _tests_hold(self, tests: tuple[tuple[ast.expr, bool], ...], where: Where) -> bool:
        return all(truth(self._eval(test, where)) is polarity for test, polarity in tests)

    def _eval_or(self, node: ast.expr | None, where: Where) -> object:
        if node is None:
            return None
        try:
            return self._eval(node, where)
        except Need:
            raise
        except Unknown:
            return None

    # -- values ----------------------------------------------------------------------------
    def _atom(self, node: ast.AST) -> object:
        name = atom_name(node)
        self._read.append(name)
        if not self._reaching:
            self._decided.add(name)
        if name in self._assignment:
            return self._assignment[name]
        raise Need(name, self._domain_of(name))

    def _domain_of(self, name: str) -> tuple[object, ...]:
        if name in self._dtype_atoms:
            return (Dtype("float16"), Dtype(BF16), None)
        option = self.options.get(name)
        if option is not None and option[0] is not None:
            return option[0]
        seen = set(self._compared().get(name, ()))
        if option is not None and option[1] is not None:
            seen.add(option[1])
        seen.discard(None)
        seen.update(Dtype(d) for d in self._dtypes_given().get(name, ()))
        if not seen or seen <= {True, False}:
            return (True, False)
        return (*sorted(seen, key=repr), OTHER)

    def _dtypes_given(self) -> dict[str, set[str]]:
        """Name -> the torch dtypes the tree gives it: by keyword in a call, or bound to a
        key of that last name in this file (``cfg.amp_dtype = torch.bfloat16``)."""
        if self._dtype_values is None:
            found: dict[str, set[str]] = {}
            if self.project is not None:
                for keyword, dtypes in self.project.dtype_keywords.items():
                    found.setdefault(keyword, set()).update(dtypes)
            for call in self.facts.of_type(ast.Call):
                note_dtype_keywords(call, self.facts.imports, found)  # type: ignore[arg-type]
            for key, values in self.facts.assignments.items():
                for value in values:
                    name = self.facts.imports.qualname(value)
                    if name in DTYPES:
                        found.setdefault(key.rsplit(".", 1)[-1], set()).add(DTYPES[name])
            self._dtype_values = found
        return self._dtype_values

    def _compared(self) -> dict[str, set[object]]:
        """Atom name -> the constants the file compares it with or looks it up by."""
        if self.constants_of is None:
            found: dict[str, set[object]] = {}
            for node in self.facts.of_type(ast.Compare):
                sides = [node.left, *node.comparators]  # type: ignore[attr-defined]
                consts = [c for s in sides for c in constants_of(s)]
                for side in sides:
                    side = _normalised_text(side) or side
                    key = dotted_key(side)
                    if not list(constants_of(side)) and (
                        key is not None or field_key(side) is not None
                    ):
                        found.setdefault(atom_name(side), set()).update(consts)
                        # ``which_dtype = cfg.get("dtype")`` compared by its name: the
                        # constants are those of what it reads too
                        for value in self.facts.assignments.get(key or "", ()):
                            if isinstance(value, (ast.Call, ast.Subscript)):
                                found.setdefault(atom_name(value), set()).update(consts)
            for node in self.facts.of_type(ast.Subscript):
                base = node.value  # type: ignore[attr-defined]
                key = node.slice  # type: ignore[attr-defined]
                if isinstance(base, ast.Dict) and dotted_key(key) is not None:
                    found.setdefault(atom_name(key), set()).update(
                        k.value for k in base.keys if isinstance(k, ast.Constant)
                    )
            self.constants_of = found
        return self.constants_of

    def _eval(self, node: ast.expr, where: Where, depth: int = 0) -> object:
        if depth > _MAX_DEPTH:
            raise Unknown("depth")
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id == "__name__":
            return "__main__"  # a script is run
        member = member_of(node)
        if member is not None and dotted_key(node) not in self.facts.assignments:
            return member  # ``Precision.FP16``: compared by its text
        if isinstance(node, (ast.Name, ast.Attribute)):
            text = dotted_key(node)
            qual = self.facts.imports.qualname(node) if where.source.linted else text
            if qual in DTYPES:
                return Dtype(DTYPES[qual])
            if text is None or (qual or "").startswith("torch."):
                return self._atom(node)
            return self._lookup(text, where, node, depth)
        if isinstance(node, ast.IfExp):
            if truth(self._eval(node.test, where, depth + 1)):
                return self._eval(node.body, where, depth + 1)
            return self._eval(node.orelse, where, depth + 1)
        if isinstance(node, ast.BoolOp):
            value: object = None
            for operand in node.values:
                value = self._eval(operand, where, depth + 1)
                if truth(value) is isinstance(node.op, ast.Or):
                    return value
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not truth(self._eval(node.operand, where, depth + 1))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._compare(node, where, depth)
        if isinstance(node, ast.Dict):
            if not all(isinstance(k, ast.Constant) for k in node.keys):
                return self._atom(node)
            return Table(
                tuple((k.value, v) for k, v in zip(node.keys, node.values, strict=True)),  # type: ignore[union-attr]
                where,
            )
        if isinstance(node, ast.Subscript):
            table = self._eval(node.value, where, depth + 1)
            if isinstance(table, Table):
                return self._pick(table, self._eval(node.slice, where, depth + 1), depth)
            return self._atom(node)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return tuple(self._eval(e, where, depth + 1) for e in node.elts)
        if isinstance(node, ast.Call):
            return self._call(node, where, depth)
        return self._atom(node)

    def _pick(self, table: Table, key: object, depth: int) -> object:
        for constant, value in table.entries:
            if constant == key and key is not OTHER:
                return self._eval(value, table.where, depth + 1)
        return OTHER

    def _compare(self, node: ast.Compare, where: Where, depth: int) -> object:
        left = self._eval(node.left, where, depth + 1)
        right = self._eval(node.comparators[0], where, depth + 1)
        op = node.ops[0]
        if isinstance(op, (ast.In, ast.NotIn)):
            if not isinstance(right, tuple):
                return self._atom(node)
            inside = left is not OTHER and left in right
            return inside if isinstance(op, ast.In) else not inside
        if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            same = left is not OTHER and right is not OTHER and left == right
            return same if isinstance(op, (ast.Eq, ast.Is)) else not same
        return self._atom(node)

    def _call(self, call: ast.Call, where: Where, depth: int) -> object:
        facts = self.facts
        qual = (facts.imports.qualname(call.func) if where.source.linted else None) or dotted_key(
            call.func
        )
        if where.source.linted and facts.resolver.scaler_ctor(call) is call:
            enabled = next((kw.value for kw in call.keywords if kw.arg == "enabled"), None)
            if enabled is None:
                return ScalerValue(True)
            return ScalerValue(truth(self._eval(enabled, where, depth + 1)))
        if where.source.linted and facts.builds_dummy_scaler(call):
            return None
        if qual == "getattr" and len(call.args) >= 2 and dotted_key(call.args[0]) == "torch":
            name = self._eval(call.args[1], where, depth + 1)
            if isinstance(name, str) and f"torch.{name}" in DTYPES:
                return Dtype(DTYPES[f"torch.{name}"])
            return OTHER
        if qual == "bool" and len(call.args) == 1:
            return truth(self._eval(call.args[0], where, depth + 1))
        inner = _normalised_text(call)
        if inner is not None:
            # ``which_dtype.lower() == "bfloat16"``: the option itself, in one spelling
            return self._eval(inner, where, depth + 1)
        return self._atom(call)

    def _lookup(
        self, key: str, where: Where, node: ast.AST | None = None, depth: int = 0
    ) -> object:
        """The value of ``key`` read at ``where``: see the module docstring."""
        memo = (id(where.source), key, id(where.scope), where.pos, self._reaching > 0)
        if memo in self._memo:
            return self._memo[memo]
        if memo in self._active or len(self._active) > _MAX_DEPTH:
            raise Unknown(key)
        self._active.add(memo)
        try:
            value = self._resolve(key, where, node, depth)
        finally:
            self._active.discard(memo)
        self._memo[memo] = value
        return value

    def _binding_at(self, key: str, where: Where) -> Binding | None:
        """The last binding of ``key`` before ``where`` in its scope whose conditions hold."""
        source = where.source
        for binding in reversed(source.by_key.get(key, ())):
            if binding.scope is not where.scope or binding.pos >= where.pos:
                continue
            if self._tests_hold(binding.tests, Where(source, binding.scope, binding.pos)):
                return binding
        return None

    def _resolve(self, key: str, where: Where, node: ast.AST | None, depth: int) -> object:
        source = where.source
        binding = self._binding_at(key, where)
        if binding is not None:
            if binding.value is None:
                return self._atom(node or ast.Name(key))
            return self._eval(binding.value, Where(source, binding.scope, binding.pos), depth + 1)
        scope = where.scope
        atom = node or parse_key(key)
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = parameter_names(scope)
            root = key.split(".", 1)[0]
            if root == "self" and "." in key:
                return self._from_class(key, scope, atom)
            if root in params:
                return self._atom(atom)
            outer = source.enclosing.get(id(scope))
            if outer is not None and (
                any(b.scope is outer for b in source.by_key.get(key, ()))
                or root in parameter_names(outer)
            ):
                # a closure reads the enclosing function's binding (its last one: the inner
                # function runs after the outer has bound what it hands it)
                return self._lookup(key, Where(source, outer, END), node, depth)
            if any(b.scope is None for b in source.by_key.get(key, ())):
                return self._lookup(key, Where(source, None, END), node, depth)
        if source.linted and self.project is not None:
            foreign = self._foreign_value(key, atom, depth)
            if foreign is not MISSING:
                return foreign
        return self._atom(atom)

    def opaque(self, key: str, where: Where) -> bool:
        """Whether the binding of ``key`` that reaches ``where`` is one whose value is not
        followed (``optimizer, scaler = init_opt(...)``, a loop target), also in the enclosing
        function of a closure."""
        source = where.source
        binding = self._binding_at(key, where)
        if binding is not None:
            return binding.value is None
        scope = where.scope
        outer = source.enclosing.get(id(scope)) if scope is not None else None
        if outer is not None and any(b.scope is outer for b in source.by_key.get(key, ())):
            return self.opaque(key, Where(source, outer, END))
        return False

    def _from_class(self, key: str, method: ast.AST, atom: ast.AST) -> object:
        cls = self._classes.get(id(method))
        if cls is None:
            return self._atom(atom)
        binders = [
            item
            for item in cls.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            and item is not method
            and any(b.scope is item for b in self.home.by_key.get(key, ()))
        ]
        if len(binders) != 1:
            # none, or set in several methods (``None`` in ``__init__``, the object in
            # ``setup``): which one ran last is not known here
            return self._atom(atom)
        return self._lookup(key, Where(self.home, binders[0], END), atom)

    def _foreign_value(self, key: str, atom: ast.AST, depth: int) -> object:
        """The value of a name imported from another module of the tree, by that module's
        module-level bindings."""
        root = key.split(".", 1)[0]
        project = self.project
        if project is None or root not in self.facts.imports.aliases:
            return MISSING
        qual = self.facts.imports.qualname(parse_key(key))
        found = project.bindings(qual) if qual is not None else None
        if found is None:
            return MISSING
        path, name = found
        cache = project.index.cache
        slot = f"flags:{path}"
        source = cache.get(slot)
        if slot not in cache:
            source = None
            try:
                text, _ = read_source(Path(path), MAX_FILE_BYTES)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tree = ast.parse(text, filename=path)
                source = Bindings(False)
                read_statements(source, tree.body, None, (), module_only=True)
            except (OSError, SyntaxError, UnicodeDecodeError, LookupError, ValueError,
                    RecursionError):  # fmt: skip
                source = None  # that file is reported on its own (AMP000)
            cache[slot] = source
        if not isinstance(source, Bindings) or name not in source.by_key:
            return MISSING
        return self._lookup(name, Where(source, None, END), atom, depth)


MISSING = object()

#: methods that respell a string option without changing which one it is
_RESPELL = frozenset({"lower", "upper", "strip", "casefold"})


def _normalised_text(node: ast.AST) -> ast.expr | None:
    """``x`` for ``x.lower()`` (also ``upper``/``strip``/``casefold``), else ``None``."""
    if (
        isinstance(node, ast.Call)
        and not node.args
        and not node.keywords
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _RESPELL
    ):
        return node.func.value
    return None


def arm_tests(node: ast.AST, target: ast.AST) -> list[tuple[ast.expr, bool]]:
    """The ``a if test else b`` arms of ``node`` that hold ``target``: (test, arm taken)."""
    for child in ast.iter_child_nodes(node):
        if child is target or _holds(child, target):
            inner = [] if child is target else arm_tests(child, target)
            if isinstance(node, ast.IfExp) and child is not node.test:
                return [(node.test, child is node.body), *inner]
            return inner
    return []


def _holds(node: ast.AST, target: ast.AST) -> bool:
    return any(sub is target for sub in ast.walk(node))


def truth(value: object) -> bool:
    if value is OTHER:
        return True
    if isinstance(value, ScalerValue):
        return True
    if isinstance(value, tuple):
        return bool(value)
    return bool(value)

"""``ampkit.lint`` is a DAG: no module imports (directly or through others) a module that
imports it back. Read with :mod:`ast` from the sources, so nothing is imported to check it.

Every import counts, including those under ``if TYPE_CHECKING:`` and inside functions:
a cycle hidden in a function body is still a cycle in the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "ampkit.lint"
ROOT = Path(__file__).resolve().parents[2] / "src" / "ampkit" / "lint"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The ``ampkit.lint`` module an imported dotted name refers to (its longest known prefix)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
            targets.append(base)
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``ampkit.lint`` modules it imports."""
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_graph_covers_the_package() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.analysis" in graph and f"{PACKAGE}.rules.base" in graph
    assert f"{PACKAGE}.facts" in graph[f"{PACKAGE}.flow"]


def test_no_import_cycles_inside_ampkit_lint() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = import_graph()
    graph[f"{PACKAGE}.facts"] = {*graph[f"{PACKAGE}.facts"], f"{PACKAGE}.flow"}
    assert find_cycle(graph) is not None


def test_parent_package_is_not_an_edge() -> None:
    # ``from ampkit.lint.rules.base import Rule`` depends on rules.base, not on ampkit.lint
    graph = import_graph()
    assert PACKAGE not in graph[f"{PACKAGE}.rules.steps"]

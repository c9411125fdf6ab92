"""The package's shape: layers that import only downwards, no import cycles, no public name
shadowed by a submodule, and ``import ampkit`` free of torch.

Imports are read with ``ast`` (nothing is executed), counting every import statement: at module
level, inside functions, and under ``if TYPE_CHECKING:``, so a cycle hidden behind a lazy or a
typing-only import is still a cycle.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import ampkit

PACKAGE_ROOT = Path(ampkit.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE_ROOT.rglob("*.py")}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_graph() -> dict[str, set[str]]:
    """``module -> modules of ampkit it imports`` (a package import counts as its __init__)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                # "from pkg import x": x is a submodule, or a name defined in pkg/__init__
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("ampkit"):
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None. Parent packages are not edges: importing
    ``ampkit.x.y`` runs ``ampkit.x/__init__`` first, but that is not a cycle by itself."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


#: The layers, bottom first (docs/architecture.md draws them). A module may import its own
#: package and anything in a lower layer; never a layer above, nor another package of its own
#: layer (the modules of the bottom layer may import each other). Keys are the first name under ``ampkit`` (``ampkit.trainer.data`` -> ``trainer``);
#: ``""`` is ``ampkit/__init__.py``.
LAYERS: tuple[frozenset[str], ...] = (
    # shared plumbing: exceptions, durable files, locks, trees of tensors, tables
    frozenset(
        {
            "errors",
            "_files",
            "_lock",
            "_logging",
            "_process",
            "_stack",
            "_text_table",
            "_torch",
            "_tree",
            "_validate",
        }
    ),
    frozenset({"precision"}),  # the core: hardware, devices, policy, scaler, engine, modes
    frozenset({"checkpoint", "models"}),  # the on-disk format; models by name
    frozenset({"doctor", "lint"}),  # diagnosis of a model; of source code (no torch)
    frozenset({"trainer"}),
    # products on the Trainer and the doctor; runs: `ampkit report`, divergence: `ampkit compare`
    frozenset({"bench", "deploy", "divergence", "gpt", "integrations", "runs"}),
    frozenset({"cli"}),
    frozenset({"", "callbacks", "__main__"}),  # the public faces
)


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer_of(module: str) -> int:
    package = _package_of(module)
    for index, layer in enumerate(LAYERS):
        if package in layer:
            return index
    raise LookupError(package)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer or sideways to another package of the same layer."""
    problems = []
    for module, targets in sorted(graph.items()):
        here = _layer_of(module)
        for target in sorted(targets):
            there = _layer_of(target)
            if there > here:
                problems.append(f"{module} imports {target}, a layer above it")
            elif there == here > 0 and _package_of(target) != _package_of(module):
                problems.append(f"{module} imports {target}, another package of its layer")
    return problems


def test_every_package_has_a_layer():
    unplaced = {_package_of(m) for m in import_graph()} - set().union(*LAYERS)
    assert not unplaced, f"give these a layer in LAYERS: {sorted(unplaced)}"


def test_layer_check_finds_upward_and_sideways_imports():
    graph = {
        "ampkit.precision.engine": {"ampkit.trainer.data"},
        "ampkit.models.resolve": {"ampkit.checkpoint.folder", "ampkit.precision.batches"},
        "ampkit.trainer.trainer": {"ampkit.precision.engine", "ampkit.trainer.data"},
    }
    assert layer_violations(graph) == [
        "ampkit.models.resolve imports ampkit.checkpoint.folder, another package of its layer",
        "ampkit.precision.engine imports ampkit.trainer.data, a layer above it",
    ]


def test_no_module_imports_a_layer_above_it():
    problems = layer_violations(import_graph())
    assert not problems, "\n".join(problems)


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_package_has_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_public_name_is_a_module_after_importing_every_submodule():
    packages = ["ampkit", *(m.name for m in pkgutil.walk_packages([str(PACKAGE_ROOT)], "ampkit."))]
    for name in packages:
        importlib.import_module(name)
    for name in packages:
        module = sys.modules[name]
        for public in getattr(module, "__all__", ()):
            value = getattr(module, public)
            assert not isinstance(value, types.ModuleType), f"{name}.{public} is a module"


def test_import_ampkit_and_the_cli_do_not_import_torch():
    code = (
        "import sys, ampkit, ampkit.cli, ampkit.lint; "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_commands_help_starts_without_torch():
    """``ampkit <command> --help`` renders without importing torch (``export``'s --format
    choices come from the format registry, which is torch-free)."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from ampkit.cli import main\n"
        "for name in sorted(main.commands):\n"
        "    result = CliRunner().invoke(main, [name, '--help'])\n"
        "    assert result.exit_code == 0, (name, result.output)\n"
        "    assert 'torch' not in sys.modules, f'ampkit {name} --help imported torch'\n"
        "print('ok', len(main.commands))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok"), out.stdout

"""Imports of the deprecated ``torch.cuda.amp`` API and the fix that migrates them.

``from torch.cuda.amp import autocast`` is rewritten to ``from torch.amp import autocast``
together with every use of the imported names (adding the device type the new API needs),
or not at all: a name bound twice, used in a way the fix cannot follow, or used in a
version-gated fallback makes the import "reported, not fixed".
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ampkit.lint.analysis import FileAnalysis
from ampkit.lint.edits import SourceEdits
from ampkit.lint.findings import Edit
from ampkit.lint.gates import Gates

__all__ = [
    "CALLS",
    "DECORATORS",
    "OLD_MODULES",
    "SUBMODULES",
    "ImportMigration",
    "decorator_nodes",
    "old_module",
]

OLD_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}
#: the submodules the old API is defined in (``torch.cuda.amp.autocast_mode.autocast``);
#: ``torch.amp`` has modules of the same names holding the new API
SUBMODULES = ("autocast_mode", "grad_scaler")


def old_module(module: str) -> tuple[str, str] | None:
    """``(device, submodule)`` of a deprecated module: ``torch.cuda.amp`` is
    ``("cuda", "")``, ``torch.cuda.amp.grad_scaler`` is ``("cuda", "grad_scaler")``."""
    if module in OLD_MODULES:
        return OLD_MODULES[module], ""
    parent, _, sub = module.rpartition(".")
    if parent in OLD_MODULES and sub in SUBMODULES:
        return OLD_MODULES[parent], sub
    return None


CALLS = ("autocast", "GradScaler")
DECORATORS = ("custom_fwd", "custom_bwd")
_MODULE = None  # ``bound`` marker: the name is the ``amp`` module itself
_OTHER = "?"  # ``bound`` marker: a name the fix does not handle


def decorator_nodes(analysis: FileAnalysis) -> dict[int, ast.expr]:
    """Decorator expressions by id, also the function of ``@decorator(...)`` calls."""
    found: dict[int, ast.expr] = {}
    for node in analysis.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                found[id(dec)] = dec
                if isinstance(dec, ast.Call):
                    found[id(dec.func)] = dec
    return found


def _bindings(analysis: FileAnalysis, name: str) -> int:
    """How many statements bind ``name`` (imports, assignments, defs, parameters)."""
    count = 0
    for node in analysis.nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            count += sum(1 for a in node.names if (a.asname or a.name.split(".", 1)[0]) == name)
        elif isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            count += 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            count += node.name == name
        elif isinstance(node, ast.arg):
            count += node.arg == name
    return count


@dataclass
class ImportMigration:
    """What one deprecated import binds and how to migrate it."""

    node: ast.Import | ast.ImportFrom
    device: str
    #: local name -> api name (``autocast``), or :data:`_MODULE` / :data:`_OTHER`
    bound: dict[str, str | None] = field(default_factory=dict)
    pattern: str = ""
    new_module: str = ""

    @classmethod
    def of(cls, node: ast.Import | ast.ImportFrom) -> ImportMigration | None:
        """The migration of an import statement, ``None`` when it imports nothing deprecated."""
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            pattern = re.escape(node.module).replace(r"\.", r"\s*\.\s*")
            old = old_module(node.module)
            if old is not None:
                found = cls(node, old[0], pattern=pattern, new_module="torch.amp")
                for alias in node.names:
                    # ``from torch.cuda.amp import grad_scaler``: a module, used as
                    # ``grad_scaler.GradScaler(...)``; ``torch.amp.grad_scaler`` has it too
                    sub = not old[1] and alias.name in SUBMODULES
                    found.bound[alias.asname or alias.name] = _MODULE if sub else alias.name
                return found
            if node.module in ("torch.cuda", "torch.cpu") and any(
                a.name == "amp" for a in node.names
            ):
                found = cls(
                    node, node.module.rsplit(".", 1)[1], pattern=pattern, new_module="torch"
                )
                for alias in node.names:
                    found.bound[alias.asname or alias.name] = (
                        _MODULE if alias.name == "amp" else _OTHER
                    )
                return found
            return None
        if isinstance(node, ast.Import):
            olds = [a for a in node.names if old_module(a.name) is not None and a.asname]
            if not olds:
                return None
            pattern = re.escape(olds[0].name).replace(r"\.", r"\s*\.\s*")
            device, submodule = old_module(olds[0].name) or ("", "")
            new_module = f"torch.amp.{submodule}" if submodule else "torch.amp"
            found = cls(node, device, pattern=pattern, new_module=new_module)
            for alias in olds:
                found.bound[alias.asname or ""] = _MODULE if len(node.names) == 1 else _OTHER
            return found
        return None

    def message(self) -> str:
        """The finding's message."""
        names = ", ".join(sorted(k for k, api in self.bound.items() if api != _OTHER))
        return f"import of {names} from the deprecated torch.{self.device}.amp; use torch.amp"

    def edits(
        self, analysis: FileAnalysis, gates: Gates, handled: dict[int, int]
    ) -> list[Edit] | None:
        """Edits for the import and every use of the names it binds, or ``None`` when unsafe.

        Calls and decorators the edits cover are recorded in ``handled`` (id -> import line).
        """
        if any(api not in (_MODULE, *CALLS, *DECORATORS) for api in self.bound.values()):
            return None
        if "*" in self.bound or any(_bindings(analysis, name) != 1 for name in self.bound):
            return None
        uses = self._uses(analysis, gates)
        if uses is None:
            return None
        source_edits = SourceEdits(analysis.source)
        node = self.node
        start = analysis.source.offset(node.lineno, node.col_offset)
        end = analysis.source.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)
        match = re.search(self.pattern, analysis.source.text[start:end])
        if match is None:
            return None
        result = [source_edits.span(start + match.start(), start + match.end(), self.new_module)]
        for use, api in uses:
            if api in DECORATORS:
                arg_edits = source_edits.decorator_args(use, self.device)
            elif isinstance(use, ast.Call):
                arg_edits = source_edits.call_args(use, self.device, api)
            else:
                arg_edits = None
            if arg_edits is None:
                return None
            result.extend(arg_edits)
            handled[id(use)] = node.lineno
        return result

    def _uses(self, analysis: FileAnalysis, gates: Gates) -> list[tuple[ast.expr, str]] | None:
        """Each use of a bound name as ``(call or decorator, api)``; ``None`` if one is not
        a call of a fixable API, or sits in a version-gated fallback."""
        calls = {id(n.func): n for n in analysis.nodes if isinstance(n, ast.Call)}
        decorators = decorator_nodes(analysis)
        uses: list[tuple[ast.expr, str]] = []
        for name_node in analysis.nodes:
            if not (isinstance(name_node, ast.Name) and name_node.id in self.bound):
                continue
            if not isinstance(name_node.ctx, ast.Load) or gates.gated(name_node):
                return None
            api = self.bound[name_node.id]
            target: ast.expr = name_node
            if api is _MODULE:
                attr = analysis.parent(name_node)
                if not isinstance(attr, ast.Attribute) or attr.attr not in (*CALLS, *DECORATORS):
                    return None
                target, api = attr, attr.attr
            if api is None or api == _OTHER:
                return None
            if api in DECORATORS:
                decorator = decorators.get(id(target))
                if decorator is None:
                    return None
                uses.append((decorator, api))
                continue
            call = calls.get(id(target))
            if call is None:
                return None
            uses.append((call, api))
        return uses

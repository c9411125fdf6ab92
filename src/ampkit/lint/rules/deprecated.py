"""AMP006: the deprecated ``torch.cuda.amp`` / ``torch.cpu.amp`` API, with its safe fix."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis
from ampkit.lint.edits import SourceEdits
from ampkit.lint.findings import Finding, Fix, Severity
from ampkit.lint.gates import Gates
from ampkit.lint.names import dotted_key, is_deprecated
from ampkit.lint.rules.base import Rule, register
from ampkit.lint.rules.migration import (
    CALLS,
    DECORATORS,
    SUBMODULES,
    ImportMigration,
    decorator_nodes,
    old_module,
)

__all__ = ["DeprecatedAmpApi"]

_ANNOTATION_FIELDS = ("annotation", "returns")
_APIS = frozenset((*CALLS, *DECORATORS))


def _split(qualname: str | None) -> tuple[str, str, str] | None:
    """``(module, api, device)`` of a deprecated API name such as ``torch.cuda.amp.autocast``."""
    if qualname is None or not is_deprecated(qualname):
        return None
    module, _, api = qualname.rpartition(".")
    old = old_module(module)
    if old is None or api not in (*CALLS, *DECORATORS):
        return None
    return module, api, old[0]


def _new_path(func: ast.expr, device: str) -> str | None:
    """``torch.amp`` spelled with the file's own root (``th.amp``) for ``th.cuda.amp.X``
    (and for ``th.cuda.amp.grad_scaler.X``, whose API ``torch.amp`` exports too)."""
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)):
        return None
    amp = func.value
    if amp.attr in SUBMODULES and isinstance(amp.value, ast.Attribute):
        amp = amp.value
    if not (
        amp.attr == "amp" and isinstance(amp.value, ast.Attribute) and amp.value.attr == device
    ):
        return None
    root = amp.value.value
    return f"{ast.unparse(root)}.amp" if dotted_key(root) is not None else None


@register
class DeprecatedAmpApi(Rule):
    """The deprecated ``torch.cuda.amp`` / ``torch.cpu.amp`` API.

    ``torch.cuda.amp.autocast``, ``torch.cuda.amp.GradScaler``, ``torch.cpu.amp.autocast``
    and the ``torch.cuda.amp.custom_fwd`` / ``custom_bwd`` decorators (also reached through
    the submodules that define them, ``torch.cuda.amp.autocast_mode`` and
    ``torch.cuda.amp.grad_scaler``, and through module aliases) are deprecated since
    PyTorch 2.4 and emit a ``FutureWarning``; ``torch.amp`` takes the device type (as first
    argument, or ``device_type=`` for the decorators). Also reported: the old autocast passed
    by reference (``ctx = torch.cuda.amp.autocast``, ``partial(torch.cuda.amp.autocast, ...)``).

    ``ampkit lint --fix`` rewrites calls, decorators and ``from torch.cuda.amp import ...``
    imports (keeping old positional autocast arguments by naming them, since the new
    signature orders them differently). Version-gated fallbacks are neither reported nor
    rewritten: the old call in the ``except ImportError:`` arm, the ``else`` arm of a
    version check, or next to its replacement in ``new() if TORCH_GE_2_4 else old()``.

    Bad::

        from torch.cuda.amp import GradScaler, autocast
        scaler = GradScaler()
        with autocast(dtype=torch.float16):
            ...

    Bad (decorators)::

        class Square(torch.autograd.Function):
            @staticmethod
            @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, x):
                return x * x

    Good::

        from torch.amp import GradScaler, autocast
        scaler = GradScaler("cuda")
        with autocast("cuda", dtype=torch.float16):
            ...

    Good (a version-gated fallback)::

        try:
            from torch.amp import custom_fwd
        except ImportError:
            from torch.cuda.amp import custom_fwd
    """

    code = "AMP006"
    name = "deprecated-amp-api"
    severity = Severity.WARNING
    summary = "Deprecated torch.cuda.amp / torch.cpu.amp API (autocast, GradScaler, custom_fwd/bwd); use torch.amp."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        imports = analysis.facts.imports
        if "amp" not in analysis.source.text:
            return
        migrations = {
            id(n): m
            for n in analysis.of_type(ast.Import, ast.ImportFrom)
            if (m := ImportMigration.of(n)) is not None  # type: ignore[arg-type]
        }
        old_names = {name for name, qual in imports.aliases.items() if is_deprecated(qual)}
        candidates: list[ast.AST] = [
            n for n in analysis.of_type(ast.Import, ast.ImportFrom) if id(n) in migrations
        ]
        candidates += [
            n
            for n in analysis.of_type(ast.Attribute, ast.Name)
            if (n.attr in _APIS if isinstance(n, ast.Attribute) else n.id in old_names)  # type: ignore[attr-defined]
            and _split(imports.qualname(n))
        ]
        if not candidates:
            return
        gates = Gates(analysis.nodes, imports)
        edits = SourceEdits(analysis.source)
        handled: dict[int, int] = {}
        for node in candidates:
            if id(node) in migrations and not gates.gated(node):
                migration = migrations[id(node)]
                fix_edits = migration.edits(analysis, gates, handled)
                fix = (
                    Fix("import from torch.amp and pass the device type", tuple(fix_edits))
                    if fix_edits
                    else None
                )
                yield self.finding(analysis, node, migration.message(), fix)
        calls = {id(n.func): n for n in analysis.nodes if isinstance(n, ast.Call)}
        decorators = decorator_nodes(analysis)
        for node in candidates:
            if isinstance(node, (ast.Import, ast.ImportFrom)) or gates.gated(node):
                continue
            parent = analysis.parent(node)
            if isinstance(parent, ast.Attribute):
                continue  # part of a longer name: the whole chain is checked
            split = _split(imports.qualname(node))
            if split is None:
                continue
            if id(node) in decorators and isinstance(node, ast.expr):
                yield self._decorator(analysis, edits, decorators[id(node)], node, split, handled)
            elif id(node) in calls and split[1] in CALLS:
                yield self._call(analysis, edits, calls[id(node)], split, handled)
            elif isinstance(node, ast.Attribute) and self._referenced(analysis, node, calls):
                module, api, device = split
                yield self.finding(
                    analysis,
                    node,
                    f"{module}.{api} is deprecated (passed by reference here); use "
                    f'torch.amp.{api} with device_type="{device}", e.g. '
                    f'functools.partial(torch.amp.{api}, "{device}")',
                )

    def _call(
        self,
        analysis: FileAnalysis,
        edits: SourceEdits,
        call: ast.Call,
        split: tuple[str, str, str],
        handled: dict[int, int],
    ) -> Finding:
        module, api, device = split
        message = f'{module}.{api} is deprecated; use torch.amp.{api}("{device}", ...)'
        fix = None
        if id(call) in handled:
            message += f" (fixed with the import on line {handled[id(call)]})"
        else:
            new = _new_path(call.func, device)
            arg_edits = edits.call_args(call, device, api) if new is not None else None
            if arg_edits is not None:
                fix = Fix(
                    f'use torch.amp.{api}("{device}", ...)',
                    (edits.replace(call.func, f"{new}.{api}"), *arg_edits),
                )
        return self.finding(analysis, call, message, fix)

    def _decorator(
        self,
        analysis: FileAnalysis,
        edits: SourceEdits,
        decorator: ast.expr,
        name: ast.expr,
        split: tuple[str, str, str],
        handled: dict[int, int],
    ) -> Finding:
        module, api, device = split
        message = f'@{module}.{api} is deprecated; use @torch.amp.{api}(device_type="{device}")'
        fix = None
        if id(decorator) in handled:
            message += f" (fixed with the import on line {handled[id(decorator)]})"
        elif api in DECORATORS:
            new = _new_path(name, device)
            arg_edits = edits.decorator_args(decorator, device) if new is not None else None
            if arg_edits is not None:
                fix = Fix(
                    f'use @torch.amp.{api}(device_type="{device}")',
                    (edits.replace(name, f"{new}.{api}"), *arg_edits),
                )
        return self.finding(analysis, decorator, message, fix)

    @staticmethod
    def _referenced(
        analysis: FileAnalysis, node: ast.Attribute, calls: dict[int, ast.Call]
    ) -> bool:
        """Whether the API object itself is handed on (stored, passed, chosen), which
        makes it called later, rather than named in a type annotation or ``isinstance``."""
        child: ast.AST = node
        parent = analysis.parent(node)
        while parent is not None and not isinstance(parent, ast.stmt):
            if isinstance(parent, ast.arg) or any(
                getattr(parent, f, None) is child for f in _ANNOTATION_FIELDS
            ):
                return False
            if isinstance(parent, ast.Call):
                func = parent.func
                if isinstance(func, ast.Name) and func.id in ("isinstance", "issubclass"):
                    return False
            child, parent = parent, analysis.parent(parent)
        if isinstance(parent, ast.AnnAssign) and parent.annotation is child:
            return False
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return parent.returns is not child
        return not isinstance(parent, ast.ExceptHandler)

"""AMP006: the deprecated ``torch.cuda.amp`` / ``torch.cpu.amp`` API, with its safe fix."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis
from ampkit.lint.findings import Edit, Finding, Fix, Severity
from ampkit.lint.names import dotted_key
from ampkit.lint.rules.base import Rule, register

__all__ = ["DeprecatedAmpApi"]

_OLD_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}
_NAMES = ("autocast", "GradScaler")
#: Old positional parameters of autocast, which torch.amp.autocast orders differently.
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


class _Edits:
    """Builds :class:`Edit` objects from ast positions of one file."""

    def __init__(self, analysis: FileAnalysis) -> None:
        self.source = analysis.source

    def replace(self, node: ast.AST, content: str) -> Edit:
        start = self.source.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.source.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return self.span(start, end, content)

    def insert_before(self, node: ast.AST, content: str) -> Edit:
        start = self.source.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        return self.span(start, start, content)

    def span(self, start: int, end: int, content: str) -> Edit:
        line, col = self.source.line_col(start)
        end_line, end_col = self.source.line_col(end)
        return Edit(start, end, content, line, col, end_line, end_col)

    def call_args(self, call: ast.Call, device: str, api: str) -> list[Edit] | None:
        """Edits adding ``"cuda"`` as first argument (and naming old positional autocast args)."""
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg in (None, "device", "device_type") for k in call.keywords
        ):
            return None
        items: list[ast.AST] = [*call.args, *call.keywords]
        if not items:
            end = self.source.offset(call.end_lineno, call.end_col_offset)  # type: ignore[arg-type]
            text = self.source.text
            close = text.rfind(")", 0, end)
            if close < 0:
                return None
            return [self.span(close, close, f'"{device}"')]
        first = min(items, key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]
        edits = [self.insert_before(first, f'"{device}", ')]
        if api == "autocast":
            if len(call.args) > len(_AUTOCAST_POSITIONAL):
                return None
            for name, arg in zip(_AUTOCAST_POSITIONAL, call.args, strict=False):
                if arg is first:
                    edits[0] = self.insert_before(first, f'"{device}", {name}=')
                else:
                    edits.append(self.insert_before(arg, f"{name}="))
        return edits


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


@register
class DeprecatedAmpApi(Rule):
    """``torch.cuda.amp.autocast``, ``torch.cuda.amp.GradScaler`` and ``torch.cpu.amp.autocast``.

    These entry points are deprecated since PyTorch 2.4 and emit a ``FutureWarning`` on every
    call; ``torch.amp`` takes the device type as its first argument. ``ampkit lint --fix``
    rewrites the calls and ``from torch.cuda.amp import ...`` imports (keeping old positional
    autocast arguments by naming them, since the new signature orders them differently).

    Bad::

        from torch.cuda.amp import GradScaler, autocast
        scaler = GradScaler()
        with autocast(dtype=torch.float16):
            ...

    Good::

        from torch.amp import GradScaler, autocast
        scaler = GradScaler("cuda")
        with autocast("cuda", dtype=torch.float16):
            ...
    """

    code = "AMP006"
    name = "deprecated-amp-api"
    severity = Severity.WARNING
    summary = (
        "Deprecated torch.cuda.amp.autocast/GradScaler or torch.cpu.amp.autocast; use torch.amp."
    )

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        edits = _Edits(analysis)
        imports = analysis.facts.imports
        handled: dict[int, int] = {}
        for node in analysis.nodes:
            if isinstance(node, (ast.ImportFrom, ast.Import)):
                yield from self._import(analysis, edits, node, handled)
        for node in analysis.nodes:
            if not isinstance(node, ast.Call):
                continue
            qual = imports.qualname(node.func) or ""
            module, _, api = qual.rpartition(".")
            if module not in _OLD_MODULES or api not in _NAMES:
                continue
            device = _OLD_MODULES[module]
            message = f'{qual} is deprecated; use torch.amp.{api}("{device}", ...)'
            if id(node) in handled:
                message += f" (fixed with the import on line {handled[id(node)]})"
                fix = None
            else:
                fix = self._call_fix(edits, node, device, api)
            yield self.finding(analysis, node, message, fix)

    def _call_fix(self, edits: _Edits, call: ast.Call, device: str, api: str) -> Fix | None:
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)):
            return None
        amp = func.value
        if not (
            amp.attr == "amp" and isinstance(amp.value, ast.Attribute) and amp.value.attr == device
        ):
            return None
        root = amp.value.value
        if dotted_key(root) is None:
            return None
        arg_edits = edits.call_args(call, device, api)
        if arg_edits is None:
            return None
        new_func = f"{ast.unparse(root)}.amp.{api}"
        return Fix(
            f'use torch.amp.{api}("{device}", ...)', (edits.replace(func, new_func), *arg_edits)
        )

    def _import(
        self,
        analysis: FileAnalysis,
        edits: _Edits,
        node: ast.Import | ast.ImportFrom,
        handled: dict[int, int],
    ) -> Iterator[Finding]:
        """Report ``from torch.cuda.amp import X`` and ``from torch.cuda import amp`` style imports."""
        bound: dict[str, tuple[str, str | None]] = {}  # local name -> (device, api or None=module)
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module in _OLD_MODULES:
                device = _OLD_MODULES[node.module]
                for alias in node.names:
                    bound[alias.asname or alias.name] = (device, alias.name)
                pattern = re.escape(node.module).replace(r"\.", r"\s*\.\s*")
                new_module = "torch.amp"
            elif node.module in ("torch.cuda", "torch.cpu"):
                device = node.module.rsplit(".", 1)[1]
                if not any(a.name == "amp" for a in node.names):
                    return
                for alias in node.names:
                    bound[alias.asname or alias.name] = (
                        device,
                        None if alias.name == "amp" else "?",
                    )
                pattern = re.escape(node.module).replace(r"\.", r"\s*\.\s*")
                new_module = "torch"
            else:
                return
        elif isinstance(node, ast.Import):
            olds = [a for a in node.names if a.name in _OLD_MODULES and a.asname]
            if not olds:
                return
            if len(node.names) != 1:
                for alias in olds:
                    bound[alias.asname or ""] = (_OLD_MODULES[alias.name], "?")
            else:
                bound[olds[0].asname or ""] = (_OLD_MODULES[olds[0].name], None)
            pattern = re.escape(olds[0].name).replace(r"\.", r"\s*\.\s*")
            new_module = "torch.amp"
        else:
            return
        fix_edits = self._import_fix(analysis, edits, node, bound, pattern, new_module, handled)
        names = ", ".join(sorted(k for k, (_, api) in bound.items() if api != "?"))
        message = f"import of {names} from the deprecated torch.{next(iter(bound.values()))[0]}.amp; use torch.amp"
        fix = (
            Fix("import from torch.amp and pass the device type", tuple(fix_edits))
            if fix_edits
            else None
        )
        yield self.finding(analysis, node, message, fix)

    def _import_fix(
        self,
        analysis: FileAnalysis,
        edits: _Edits,
        node: ast.Import | ast.ImportFrom,
        bound: dict[str, tuple[str, str | None]],
        pattern: str,
        new_module: str,
        handled: dict[int, int],
    ) -> list[Edit] | None:
        """Edits for the import and every use of the names it binds, or ``None`` when unsafe."""
        if any(api not in (None, *_NAMES) for _, api in bound.values()) or "*" in bound:
            return None
        if any(_bindings(analysis, name) != 1 for name in bound):
            return None
        uses: list[tuple[ast.Call, str, str]] = []
        calls = {id(n.func): n for n in analysis.nodes if isinstance(n, ast.Call)}
        for name_node in analysis.nodes:
            if not (isinstance(name_node, ast.Name) and name_node.id in bound):
                continue
            if not isinstance(name_node.ctx, ast.Load):
                return None
            device, api = bound[name_node.id]
            func: ast.AST = name_node
            if api is None:
                attr = analysis.parent(name_node)
                if not isinstance(attr, ast.Attribute) or attr.attr not in _NAMES:
                    return None
                func, api = attr, attr.attr
            call = calls.get(id(func))
            if call is None:
                return None
            uses.append((call, device, api))
        result: list[Edit] = []
        start = analysis.source.offset(node.lineno, node.col_offset)
        end = analysis.source.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)
        match = re.search(pattern, analysis.source.text[start:end])
        if match is None:
            return None
        result.append(edits.span(start + match.start(), start + match.end(), new_module))
        for call, device, api in uses:
            arg_edits = edits.call_args(call, device, api)
            if arg_edits is None:
                return None
            result.extend(arg_edits)
            handled[id(call)] = node.lineno
        return result

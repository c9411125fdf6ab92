"""Source edits for the ``torch.cuda.amp`` -> ``torch.amp`` migration (used by AMP006's fix).

Edits are built from ast positions and replace exact character spans, so nothing else in
the file changes (formatting, comments, line endings).
"""

from __future__ import annotations

import ast

from ampkit.lint.findings import Edit
from ampkit.lint.source import SourceText

__all__ = ["AUTOCAST_POSITIONAL", "SourceEdits"]

#: Old positional parameters of autocast, which torch.amp.autocast orders differently.
AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


class SourceEdits:
    """Builds :class:`Edit` objects from ast positions of one file."""

    def __init__(self, source: SourceText) -> None:
        self.source = source

    def replace(self, node: ast.AST, content: str) -> Edit:
        """Replace the text of ``node``."""
        start = self.source.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.source.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return self.span(start, end, content)

    def insert_before(self, node: ast.AST, content: str) -> Edit:
        """Insert text where ``node`` starts."""
        start = self.source.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        return self.span(start, start, content)

    def insert_after(self, node: ast.AST, content: str) -> Edit:
        """Insert text where ``node`` ends."""
        end = self.source.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return self.span(end, end, content)

    def span(self, start: int, end: int, content: str) -> Edit:
        """Replace the characters ``[start, end)``."""
        line, col = self.source.line_col(start)
        end_line, end_col = self.source.line_col(end)
        return Edit(start, end, content, line, col, end_line, end_col)

    def _before_close(self, call: ast.Call, content: str) -> list[Edit] | None:
        end = self.source.offset(call.end_lineno, call.end_col_offset)  # type: ignore[arg-type]
        close = self.source.text.rfind(")", 0, end)
        if close < 0:
            return None
        return [self.span(close, close, content)]

    def call_args(self, call: ast.Call, device: str, api: str) -> list[Edit] | None:
        """Edits adding ``"cuda"`` as first argument (and naming old positional autocast args)."""
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg in (None, "device", "device_type") for k in call.keywords
        ):
            return None
        items: list[ast.AST] = [*call.args, *call.keywords]
        if not items:
            return self._before_close(call, f'"{device}"')
        first = min(items, key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]
        edits = [self.insert_before(first, f'"{device}", ')]
        if api == "autocast":
            if len(call.args) > len(AUTOCAST_POSITIONAL):
                return None
            for name, arg in zip(AUTOCAST_POSITIONAL, call.args, strict=False):
                if arg is first:
                    edits[0] = self.insert_before(first, f'"{device}", {name}=')
                else:
                    edits.append(self.insert_before(arg, f"{name}="))
        return edits

    def decorator_args(self, decorator: ast.expr, device: str) -> list[Edit] | None:
        """Edits giving ``custom_fwd``/``custom_bwd`` the keyword-only ``device_type``.

        ``@custom_fwd`` becomes ``@custom_fwd(device_type="cuda")`` and
        ``@custom_fwd(cast_inputs=torch.float32)`` gets ``device_type="cuda", `` in front.
        """
        keyword = f'device_type="{device}"'
        if not isinstance(decorator, ast.Call):
            return [self.insert_after(decorator, f"({keyword})")]
        if decorator.args or any(k.arg in (None, "device_type") for k in decorator.keywords):
            return None
        if not decorator.keywords:
            return self._before_close(decorator, keyword)
        return [self.insert_before(decorator.keywords[0], f"{keyword}, ")]

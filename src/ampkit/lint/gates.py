"""Version-gated fallbacks: code that uses the old ``torch.cuda.amp`` API only on old torch.

Libraries that support several PyTorch releases write the deprecated call next to its
replacement and let a condition pick one::

    scaler = torch.amp.GradScaler("cuda") if TORCH_GE_2_4 else torch.cuda.amp.GradScaler()

    try:
        from torch.amp import custom_fwd
    except ImportError:
        from torch.cuda.amp import custom_fwd

    if hasattr(torch.amp, "GradScaler"): ... else: ...

The old arm never runs on a torch that deprecates it, and rewriting it breaks the old-torch
path. :class:`Gates` finds such arms structurally: an arm of an ``if``, a conditional
expression or a ``try`` that uses the old API while another arm uses the new one (unless the
condition picks a device, which any torch runs), or whose condition is a version or feature
check.
"""

from __future__ import annotations

import ast
import re

from ampkit.lint.names import Imports, is_deprecated, is_replacement

__all__ = ["Gates"]

_VERSION_WORDS = re.compile(r"version|^_*torch_.*\d|hasattr|getattr", re.IGNORECASE)
# a test that picks a device, not a torch release: ``device == "cpu"``, ``x.device.type``,
# ``torch.cuda.is_available()`` (the old arm runs on every torch there)
_DEVICE_WORDS = re.compile(r"device|is_available", re.IGNORECASE)


def _own_flags(node: ast.AST, imports: Imports) -> tuple[bool, bool]:
    """``(new, old)``: whether the node itself names the current or the deprecated API."""
    names: list[str | None] = []
    if isinstance(node, (ast.Name, ast.Attribute)):
        names.append(imports.qualname(node))
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    elif isinstance(node, ast.Import):
        names.extend(alias.name for alias in node.names)
    return any(is_replacement(n) for n in names), any(is_deprecated(n) for n in names)


def _version_test(test: ast.expr) -> bool:
    return _names_match(test, _VERSION_WORDS)


def _device_test(test: ast.expr | None) -> bool:
    return test is not None and not _version_test(test) and _names_match(test, _DEVICE_WORDS)


def _names_match(test: ast.expr, words: re.Pattern[str]) -> bool:
    for node in ast.walk(test):
        word = (
            node.id
            if isinstance(node, ast.Name)
            else node.attr
            if isinstance(node, ast.Attribute)
            else ""
        )
        if word and words.search(word):
            return True
    return False


class Gates:
    """The nodes that sit in a version-gated fallback arm (see the module docstring)."""

    def __init__(self, nodes: list[ast.AST], imports: Imports) -> None:
        self._gated: set[int] = set()
        flags: dict[int, tuple[bool, bool]] = {}
        for node in reversed(nodes):  # every node comes after its parent in ``nodes``
            new, old = _own_flags(node, imports)
            for child in ast.iter_child_nodes(node):
                c_new, c_old = flags.get(id(child), (False, False))
                new, old = new or c_new, old or c_old
            flags[id(node)] = (new, old)
            if old:
                self._gate(node, flags)

    def _gate(self, node: ast.AST, flags: dict[int, tuple[bool, bool]]) -> None:
        test: ast.expr | None = None
        arms: list[list[ast.AST]]
        if isinstance(node, ast.If):
            arms, test = [list(node.body), list(node.orelse)], node.test
        elif isinstance(node, ast.IfExp):
            arms, test = [[node.body], [node.orelse]], node.test
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            body = [*node.body, *node.orelse]  # type: ignore[attr-defined]
            arms = [body, *([*h.body] for h in node.handlers)]  # type: ignore[attr-defined]
        else:
            return
        arm_flags = [
            (any(flags[id(n)][0] for n in arm), any(flags[id(n)][1] for n in arm)) for arm in arms
        ]
        # a version or feature check counts when the current API is what it checks for or
        # what another arm uses (the deprecated arm may be the new-torch path otherwise)
        checked = test is not None and flags[id(test)][0]
        for index, (_, old) in enumerate(arm_flags):
            if not old:
                continue
            # an arm picked by the device (``if device == "cpu": torch.cpu.amp.autocast(...)
            # elif ...: torch.amp.autocast(...)``) runs on every torch: not a fallback
            other_new = not _device_test(test) and any(
                new for i, (new, _) in enumerate(arm_flags) if i != index
            )
            if other_new or (checked and test is not None and _version_test(test)):
                for top in arms[index]:
                    self._gated.update(id(n) for n in ast.walk(top))

    def gated(self, node: ast.AST) -> bool:
        """Whether ``node`` is inside a version-gated fallback arm."""
        return id(node) in self._gated

"""Shared fixtures of the lint tests.

``ampkit.cli`` registers every subcommand when imported. On a branch where a sibling
subcommand module is not there yet, a stand-in is registered so that ``lint_cmd`` imports.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import click

_PKG = Path(__file__).resolve().parents[2] / "src" / "ampkit"
_CLI = _PKG / "cli"

# Without src/ampkit/__init__.py on this branch, ``ampkit`` is a namespace package and an
# installed regular ``ampkit`` elsewhere on sys.path (already imported by pytest for the
# ``filterwarnings`` setting) would shadow it: search this tree first.
if not (_PKG / "__init__.py").exists():
    if "ampkit" not in sys.modules:
        _pkg = types.ModuleType("ampkit")
        _pkg.__path__ = [str(_PKG)]
        sys.modules["ampkit"] = _pkg
    elif str(_PKG) not in list(sys.modules["ampkit"].__path__):
        sys.modules["ampkit"].__path__.insert(0, str(_PKG))  # type: ignore[union-attr]

for _name in ("formats_cmd", "train_cmd"):
    if not (_CLI / f"{_name}.py").exists() and f"ampkit.cli.{_name}" not in sys.modules:
        _module = types.ModuleType(f"ampkit.cli.{_name}")
        _command = _name.removesuffix("_cmd")
        setattr(_module, _command, click.Command(_command, help="stand-in for tests"))
        sys.modules[f"ampkit.cli.{_name}"] = _module

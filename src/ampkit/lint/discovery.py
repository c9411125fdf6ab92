"""Which files get linted, and how their text is read.

Folders are walked for ``*.py`` (skipping :data:`EXCLUDED_DIRS` and ``--exclude`` globs);
sources are decoded honouring PEP 263 encoding declarations.
"""

from __future__ import annotations

import codecs
import fnmatch
import io
import os
import tokenize
from collections.abc import Iterator, Sequence
from pathlib import Path

from ampkit.errors import ConfigurationError

__all__ = ["EXCLUDED_DIRS", "iter_python_files", "read_source"]

#: Folders never entered when walking a directory (explicitly named files are always linted).
EXCLUDED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "node_modules",
     ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "build", "dist", "site-packages"}
)  # fmt: skip


def read_source(path: Path) -> tuple[str, str]:
    """Read a Python file honouring its encoding declaration (PEP 263), keeping line endings.

    Returns the text and the encoding (needed to write a fixed file back unchanged elsewhere).
    """
    data = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    if encoding == "utf-8-sig" and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
        encoding = "utf-8"
    return data.decode(encoding), encoding


def _excluded(path: Path, patterns: Sequence[str]) -> bool:
    """Whether ``path`` (its name or its ``/``-separated path) matches an exclude pattern."""
    if not patterns:
        return False
    text = path.as_posix()
    return any(
        fnmatch.fnmatch(path.name, p) or fnmatch.fnmatch(text, p) or fnmatch.fnmatch(text, f"*/{p}")
        for p in patterns
    )


def iter_python_files(
    paths: Sequence[str | os.PathLike[str]], exclude: Sequence[str] = ()
) -> Iterator[Path]:
    """The files to lint: named files as given, folders searched for ``*.py`` (sorted).

    ``exclude`` holds glob patterns (``legacy/*``, ``*_pb2.py``) matched against names and
    paths; they apply to named files too, so pre-commit runs honour them.

    Raises:
        ConfigurationError: a path does not exist.
    """
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if not _excluded(path, exclude):
                yield path
        elif path.is_dir():
            for root, dirs, files in os.walk(path):
                base = Path(root)
                dirs[:] = sorted(
                    d
                    for d in dirs
                    if d not in EXCLUDED_DIRS
                    and not d.startswith(".")
                    and not _excluded(base / d, exclude)
                )
                for name in sorted(files):
                    if name.endswith(".py") and not _excluded(base / name, exclude):
                        yield base / name
        else:
            raise ConfigurationError(
                f"path {str(raw)!r} does not exist; "
                "pass existing .py files or folders to `ampkit lint`"
            )

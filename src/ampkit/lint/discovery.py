"""Which files get linted, and how their text is read.

Folders are walked for ``*.py`` (skipping :data:`EXCLUDED_DIRS` and ``--exclude`` globs);
anything that is not a regular file (a FIFO named ``x.py``, a symlink to ``/dev/zero``) is
skipped with a note and never opened for reading. A path that exists but cannot be examined (a
symlink loop, a folder without search permission) is linted like an unreadable file: one
``AMP000`` finding, which fails the run. Files larger than :data:`MAX_FILE_BYTES` are not
read (one ``AMP000`` finding each; ``--max-file-size`` raises the limit). Sources are decoded
honouring PEP 263 encoding declarations.
"""

from __future__ import annotations

import codecs
import fnmatch
import io
import os
import stat
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ampkit.errors import ConfigurationError

__all__ = [
    "EXCLUDED_DIRS",
    "MAX_FILE_BYTES",
    "FileTooLargeError",
    "NotRegularFileError",
    "Skipped",
    "SourceFile",
    "discover",
    "iter_python_files",
    "not_regular",
    "read_source",
]

#: Folders never entered when walking a directory (explicitly named files are always linted).
EXCLUDED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "node_modules",
     ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "build", "dist", "site-packages"}
)  # fmt: skip


#: Files above this size are not analysed (the analysis holds the syntax tree and its facts,
#: about 50 bytes of memory per byte of source): 5 MB is far above hand-written training code
#: and keeps one file's analysis under about 250 MB. ``--max-file-size`` / ``max-file-size``
#: in ``[tool.ampkit.lint]`` change it.
MAX_FILE_BYTES = 5_000_000


@dataclass(frozen=True)
class SourceFile:
    """A file to lint and the tree it was found in (``--fix`` never writes outside it)."""

    path: Path
    root: Path


@dataclass(frozen=True)
class Skipped:
    """A path that is not linted, and why (a FIFO, a device, a broken symlink...)."""

    path: Path
    reason: str

    @property
    def note(self) -> str:
        """The line ``ampkit lint`` prints about it."""
        return f"{self.path}: not linted: {self.reason}"


def not_regular(path: Path) -> str | None:
    """Why ``path`` is not a regular file (following symlinks), or ``None`` when it is one.

    Reading a FIFO blocks and ``/dev/zero`` never ends, so only regular files are read.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symlink" if os.path.islink(path) else "it does not exist"
    except OSError:  # a symlink loop, no search permission: read it and report AMP000
        return None
    if stat.S_ISREG(mode):
        return None
    for test, kind in _KINDS:
        if test(mode):
            return f"not a regular file ({kind})"
    return "not a regular file"


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFileError(OSError):
    """Raised instead of reading something that is not a regular file."""


class FileTooLargeError(OSError):
    """Raised instead of reading a file over the size limit."""


def read_source(path: Path, max_bytes: int | None = None) -> tuple[str, str]:
    """Read a Python file honouring its encoding declaration (PEP 263), keeping line endings.

    Returns the text and the encoding (needed to write a fixed file back unchanged elsewhere).

    Args:
        max_bytes: refuse a file larger than this (None: no limit).

    Raises:
        NotRegularFileError: ``path`` is a FIFO, a device or another non-regular file (it is
            opened without blocking and checked before anything is read).
        FileTooLargeError: the file is larger than ``max_bytes`` (checked before reading).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(f"{path} is not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise FileTooLargeError(
                f"{info.st_size / 1e6:.1f} MB is over the {max_bytes / 1e6:g} MB limit; raise "
                "it with --max-file-size (or max-file-size in [tool.ampkit.lint]), or exclude "
                "the file"
            )
        data = handle.read()
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


def discover(
    paths: Sequence[str | os.PathLike[str]], exclude: Sequence[str] = ()
) -> tuple[list[SourceFile], list[Skipped]]:
    """The files to lint and the paths skipped because they are not regular files.

    Named files are taken as given, folders are searched for ``*.py`` (sorted, skipping
    :data:`EXCLUDED_DIRS` and hidden folders). ``exclude`` holds glob patterns (``legacy/*``,
    ``*_pb2.py``) matched against names and paths; they apply to named files too, so
    pre-commit runs honour them.

    Raises:
        ConfigurationError: a path does not exist.
    """
    files: list[SourceFile] = []
    skipped: list[Skipped] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for root, dirs, names in os.walk(path):
                base = Path(root)
                dirs[:] = sorted(
                    d
                    for d in dirs
                    if d not in EXCLUDED_DIRS
                    and not d.startswith(".")
                    and not _excluded(base / d, exclude)
                )
                for name in sorted(names):
                    candidate = base / name
                    if not name.endswith(".py") or _excluded(candidate, exclude):
                        continue
                    reason = not_regular(candidate)
                    if reason is None:
                        files.append(SourceFile(candidate, path))
                    else:
                        skipped.append(Skipped(candidate, reason))
        elif os.path.lexists(path):
            if _excluded(path, exclude):
                continue
            reason = not_regular(path)
            if reason is None:
                files.append(SourceFile(path, path.parent))
            else:
                skipped.append(Skipped(path, reason))
        else:
            raise ConfigurationError(
                f"path {str(raw)!r} does not exist; "
                "pass existing .py files or folders to `ampkit lint`"
            )
    return files, skipped


def iter_python_files(
    paths: Sequence[str | os.PathLike[str]], exclude: Sequence[str] = ()
) -> Iterator[Path]:
    """The regular files :func:`discover` finds (skipped paths are left out).

    Raises:
        ConfigurationError: a path does not exist.
    """
    files, _ = discover(paths, exclude)
    for source in files:
        yield source.path

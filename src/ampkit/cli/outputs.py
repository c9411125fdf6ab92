"""Files named by flags (``--json``, ``--html``, ``--plot``): checked before the work starts,
so a bad path fails in a second rather than after a long diagnosis or benchmark, and written
with one-line errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ampkit._files import refuses_new_files
from ampkit.errors import ConfigurationError, StorageError

__all__ = ["check_output", "writing"]


def check_output(path: str | None, flag: str, *, creates_folders: bool = False) -> None:
    """Refuse an output path that cannot be written: a folder, a path inside a file, a
    missing folder (unless the writer creates folders) or one that refuses a new file.

    Permission bits are not trusted (as root every folder looks writable, yet ``/sys``,
    ``/proc`` and read-only mounts refuse files): a file is created in the folder and removed
    again. ``-`` (standard output) needs no check.

    Raises:
        ConfigurationError: the path cannot be written; the message names ``flag``.
    """
    if path is None or path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise ConfigurationError(
            f"{flag}: {target} is a folder. Pass a file path, e.g. {target / target.name}."
        )
    folder = target.parent
    while creates_folders and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.exists():
        raise ConfigurationError(
            f"{flag}: cannot write {target}: the folder {folder} does not exist. Create it or "
            "pass another path."
        )
    if not folder.is_dir():
        raise ConfigurationError(
            f"{flag}: cannot write {target}: {folder} is a file, not a folder. Pass another path."
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigurationError(
            f"{flag}: cannot write {target}: the folder {folder} is not writable. Pass a path "
            "you can write to."
        )
    refusal = refuses_new_files(folder)
    if refusal is not None:
        raise ConfigurationError(
            f"{flag}: cannot write {target}: the folder {folder} refuses new files "
            f"({refusal}). Pass a path you can write to."
        )


@contextmanager
def writing(path: str, flag: str) -> Iterator[None]:
    """Turn an ``OSError`` while writing ``path`` into a one-line :class:`StorageError`."""
    try:
        yield
    except OSError as exc:
        raise StorageError.from_os_error(exc, f"{flag} {path}") from None

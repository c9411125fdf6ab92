"""The file :func:`ampkit.export` writes: checked before the export starts, cleared of what
earlier killed exports left beside it, and written atomically with errors that name it.

* :func:`check_target` runs first, in a fraction of a second, so a path that cannot be
  written (a folder, a path inside a file, a folder that refuses new files, a suffix the
  format does not write) fails before the minutes of tracing and parity checking.
* :func:`remove_stale_temporaries`: :func:`ampkit._files.atomic_write` writes
  ``.NAME.tmp-PID`` beside the target and renames it into place; a process killed during the
  write (SIGKILL, a power cut) leaves that file behind. Before writing, the exporter removes
  such files of export formats in the target's folder, and only those whose writer is gone:
  the process ``PID`` no longer exists, or the file is older than :data:`STALE_AFTER_S`
  (the PID was reused). Nothing else is touched.
* :func:`write_target`: the atomic write; a full disk or a refused write is a
  :class:`~ampkit.errors.StorageError` naming the file.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from ampkit._files import atomic_write, refuses_new_files
from ampkit._process import pid_alive
from ampkit.errors import ConfigurationError, StorageError

__all__ = ["STALE_AFTER_S", "check_target", "remove_stale_temporaries", "write_target"]

#: A temporary export file older than this (seconds) is stale even if its PID is alive again.
STALE_AFTER_S = 3600.0

#: ``.NAME.tmp-PID``: how :func:`ampkit._files.atomic_write` names its temporary file.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")


def check_target(path: str | os.PathLike, suffix: str, format_name: str) -> Path:
    """Refuse a ``path`` the export could not write, before any work; return it as a Path.

    The folder may be missing (the exporter creates it): the nearest existing folder above it
    must then accept a new file. Permission bits are not trusted (as root every folder looks
    writable): a probe file is created there and removed.

    Args:
        path: the file to write.
        suffix: the suffix the format writes (``.onnx``).
        format_name: the format's name, for the message.

    Raises:
        ConfigurationError: ``path`` is a folder, has another suffix, lies inside a file, or
            its folder refuses new files (the message says why and how to fix it).
    """
    target = Path(path)
    if target.is_dir():
        raise ConfigurationError(f"export: {target} is a folder. Pass a file path to write.")
    if target.suffix.lower() != suffix.lower():
        seen = f"ends in {target.suffix!r}" if target.suffix else "has no suffix"
        raise ConfigurationError(
            f"export: path {target} {seen}, but format {format_name!r} writes {suffix} files. "
            f"Name the file {target.with_name(target.stem + suffix).name}, or pass the format "
            f"that writes {target.suffix or 'such'} files."
        )
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigurationError(
            f"export: cannot write {target}: {folder} is a file, not a folder. Pass another path."
        )
    refusal = refuses_new_files(folder)
    if refusal is not None:
        raise ConfigurationError(
            f"export: cannot write {target}: the folder {folder} refuses new files "
            f"({refusal}). Pass a path you can write to."
        )
    return target


def remove_stale_temporaries(folder: Path, suffixes: Iterable[str]) -> list[str]:
    """Remove the temporary files of earlier, killed exports from ``folder``; return their
    names.

    A file is removed only when its name is ``.NAME.tmp-PID`` with ``NAME`` ending in one of
    ``suffixes`` (the export formats' suffixes), ``PID`` is not this process, and the process
    ``PID`` no longer exists or the file was last modified more than :data:`STALE_AFTER_S`
    ago. Files that vanish meanwhile or cannot be removed are left alone.
    """
    wanted = tuple(s.lower() for s in suffixes)
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match is None or not match["name"].lower().endswith(wanted):
            continue
        pid = int(match["pid"])
        try:
            if not entry.is_file(follow_symlinks=False) or pid == os.getpid():
                continue
            old = now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER_S
            if pid_alive(pid) and not old:
                continue  # another export may be writing it right now
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(entry.name)
    return sorted(removed)


def write_target(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically (creating its folder).

    Raises:
        StorageError: the disk is full, over quota, read-only or refuses the file; the message
            names ``target`` and nothing is left at or beside it.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data)
    except OSError as exc:
        raise StorageError.from_os_error(
            exc,
            f"the export file {target} ({len(data):,} bytes)",
            "Nothing was written. Free some space or pass another path, then export again.",
        ) from exc

"""Durable file writes: every file ampkit writes goes through :func:`atomic_write`.

A reader (or a process restarted after a crash) sees either the old file or the complete new
one, never a torn one: the bytes go to a temporary file in the same folder, are fsynced, the
temporary file is renamed over the target with ``os.replace`` and the folder is fsynced so the
rename itself survives a power cut. On any error the temporary file is removed.

Append-only logs (``metrics.jsonl``) grow by whole records with :func:`append_record` instead.

Small files ampkit reads back (manifests, ``--config``) go through :func:`read_regular` (a
regular file only, never blocking on a FIFO or device, at most a given size) and JSON through
:func:`load_json` (nesting bounded before the parser sees it).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = [
    "append_record",
    "atomic_write",
    "fsync_dir",
    "is_disk_full",
    "json_safe",
    "load_json",
    "read_regular",
    "refuses_new_files",
    "write_json",
]


def fsync_dir(path: str | Path) -> None:
    """Flush a folder's entries (renames, new files) to disk. A no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open folders
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: str | Path,
    data: bytes | str | Callable[[IO[bytes]], None],
    *,
    encoding: str = "utf-8",
) -> Path:
    """Write ``data`` to ``path`` atomically and durably; return the path.

    Args:
        path: the target file; its folder must exist.
        data: bytes, text (encoded with ``encoding``), or a function that writes into the
            open binary file (for writers such as ``torch.save`` or ``Figure.savefig``).

    Raises:
        OSError: the folder is missing or not writable, or the disk is full; nothing is left
            behind at ``path`` or beside it.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode(encoding) if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return target


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc``, or an error that caused it, is a full disk or an exhausted quota.

    Follows ``__cause__``/``__context__`` and the per-rank ``failures`` that
    ``torch.distributed.checkpoint`` collects, so a write error wrapped by a library counts.
    """
    seen: set[int] = set()
    stack = [exc]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError) and item.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(item):
            return True
        stack.extend(e for e in (item.__cause__, item.__context__) if e is not None)
        failures = getattr(item, "failures", None)
        for failure in failures.values() if isinstance(failures, dict) else ():
            error = failure[0] if isinstance(failure, tuple) and failure else failure
            if isinstance(error, BaseException):
                stack.append(error)
    return False


def append_record(fd: int, record: bytes) -> None:
    """Append one whole record (e.g. a JSON line) to the file open at ``fd`` with one write.

    ``fd`` must be open with ``O_APPEND``. The file ends up with all of ``record`` or none of
    it: should the disk fill up part-way (a short write, or an error after some bytes), the
    file is cut back to its previous length before the error is raised, so no torn record is
    left for a later reader. Not fsynced: call ``os.fsync(fd)`` where durability matters.

    Raises:
        OSError: the write failed (``ENOSPC`` for a full disk); the file is as it was.
    """
    size = os.fstat(fd).st_size
    try:
        written = os.write(fd, record)
        if written != len(record):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except BaseException:
        os.ftruncate(fd, size)  # cutting a file back needs no new space
        raise


def json_safe(value: Any) -> Any:
    """``value`` as strict-JSON data: non-finite floats become None, tuples become lists,
    mapping keys become strings (recursively)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json(path: str | Path, value: Any) -> Path:
    """Write ``value`` as indented strict JSON (see :func:`json_safe`), atomically."""
    text = json.dumps(json_safe(value), indent=2, allow_nan=False) + "\n"
    return atomic_write(path, text)


def refuses_new_files(folder: str | Path) -> str | None:
    """Why ``folder`` refuses a new file (its ``strerror``), or None when it accepts one.

    Permission bits are not trusted (as root every folder looks writable, yet ``/sys``,
    ``/proc`` and read-only mounts refuse files): a probe file is created there and removed.
    """
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".ampkit-probe-"):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, refused above ``limit`` bytes.

    Opened without blocking and checked once open, so a FIFO, a device (a link to
    ``/dev/zero``) or a socket is refused at once instead of stalling the reader or filling
    its memory; a file that grows past ``limit`` while being read is refused too.

    Raises:
        OSError: it cannot be opened or read (missing, no permission: the errno says which).
        ValueError: it is not a regular file, or holds more than ``limit`` bytes (the message
            says which, for the caller's one line).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"it is {_kind(mode)}, not a regular file")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise ValueError(f"it holds more than {limit} bytes, the most allowed")
        return b"".join(chunks)
    finally:
        os.close(fd)


#: A JSON string (escapes included): what :func:`load_json` removes before counting brackets.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
#: An innermost array or object (no bracket inside).
_JSON_INNERMOST = re.compile(rb"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


def load_json(data: bytes, max_depth: int) -> Any:
    """Parse ``data`` as JSON, refusing arrays and objects nested more than ``max_depth`` deep
    before the parser sees them (a file of 100,000 ``[`` would exhaust its recursion).

    The nesting is measured without recursion: strings are blanked out, then innermost
    brackets are removed ``max_depth`` times; any left over are too deep (or unclosed).

    Raises:
        ValueError: it is not UTF-8 JSON (``json.JSONDecodeError``), or nested too deeply.
    """
    rest = _JSON_STRING.sub(b'""', data)
    for _ in range(max_depth):
        rest, count = _JSON_INNERMOST.subn(b"", rest)
        if not count:
            break
    if any(c in rest for c in b"[]{}"):
        raise ValueError(
            f"its arrays and objects nest more than {max_depth} deep (or are not closed)"
        )
    return json.loads(data)

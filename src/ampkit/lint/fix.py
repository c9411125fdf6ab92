"""The codemod behind ``ampkit lint --fix``: apply the edits of fixable findings to a text.

Only rules that attach a :class:`~ampkit.lint.findings.Fix` are rewritten (today AMP006,
the deprecated ``torch.cuda.amp`` API); everything else in the file is left byte for byte.
Fixes are applied by source position, so formatting and comments elsewhere survive, and the
process repeats until nothing fixable is left, which makes ``--fix`` idempotent.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ampkit.lint.check import check_source
from ampkit.lint.discovery import MAX_FILE_BYTES, read_source
from ampkit.lint.findings import Edit, Finding
from ampkit.lint.selection import Selection

__all__ = ["FileFix", "apply_fixes", "fix_file", "fix_source"]

_MAX_ROUNDS = 5


def apply_fixes(text: str, findings: Iterable[Finding]) -> tuple[str, int]:
    """Apply the fixes of ``findings`` to ``text``; return the new text and how many applied.

    A fix whose edits overlap an already accepted fix is skipped (the next round retries it).
    """
    accepted: list[Edit] = []
    count = 0
    for finding in findings:
        if finding.fix is None or not finding.fix.edits:
            continue
        edits = sorted(finding.fix.edits)
        if any(_overlaps(e, a) for e in edits for a in accepted):
            continue
        accepted.extend(edits)
        count += 1
    out = text
    for edit in sorted(accepted, key=lambda e: (e.start, e.end), reverse=True):
        out = out[: edit.start] + edit.content + out[edit.end :]
    return out, count


def _overlaps(a: Edit, b: Edit) -> bool:
    if a.start == a.end == b.start == b.end:
        return True
    return bool(a.start < b.end and b.start < a.end)


def fix_source(
    text: str, path: str = "<string>", selection: Selection | None = None
) -> tuple[str, int]:
    """Rewrite everything safely fixable in ``text``; return the new text and the fix count."""
    total = 0
    for _ in range(_MAX_ROUNDS):
        findings = check_source(text, path, selection)
        text, count = apply_fixes(text, findings)
        total += count
        if count == 0:
            break
    return text, total


@dataclass(frozen=True)
class FileFix:
    """What ``--fix`` did to one file: how many fixes it wrote, or why it wrote nothing.

    ``failed``: the file needed fixes that could not be written (read-only, or the write
    failed); ``ampkit lint --fix`` then exits 1.
    """

    count: int = 0
    note: str | None = None
    failed: bool = False


def fix_file(
    path: Path,
    selection: Selection | None = None,
    root: Path | None = None,
    max_bytes: int | None = MAX_FILE_BYTES,
) -> FileFix:
    """Apply safe fixes to a file in place (same encoding and line endings).

    ``root`` is the tree being linted (default: the file's folder). A file whose real path
    lies outside it (a symlink leaving the tree) is not written, and neither is anything
    that is not a regular file, a file whose permission bits say read-only (as ruff and black
    refuse them; root could otherwise replace it) or one over ``max_bytes``. The new text goes
    to a temporary file in the same folder that then replaces the real file in one step, so a
    crash never leaves half a file, and a symlink inside the tree keeps pointing at the (now
    fixed) file. A write the system refuses (an immutable file, a read-only folder) is a note,
    never an exception.
    """
    try:
        text, encoding = read_source(path, max_bytes)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
        return FileFix()  # linting it reports AMP000
    new, count = fix_source(text, str(path), selection)
    if not count or new == text:
        return FileFix(count)
    real = Path(os.path.realpath(path))
    tree = Path(os.path.realpath(root if root is not None else path.parent))
    if real != tree and tree not in real.parents:
        return FileFix(0, f"{path}: not fixed: it is a symlink to {real}, outside {tree}")
    mode = stat.S_IMODE(os.stat(real).st_mode)
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return FileFix(
            0,
            f"{path}: not fixed: it is read-only (mode {mode:04o}); make it writable "
            "(chmod u+w) to let --fix rewrite it",
            failed=True,
        )
    try:
        _write_atomically(real, new.encode(encoding))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return FileFix(0, f"{path}: not fixed: it cannot be written ({reason})", failed=True)
    return FileFix(count)


def _write_atomically(target: Path, data: bytes) -> None:
    """Replace ``target``'s content by ``data`` through a temporary file in its folder."""
    mode = stat.S_IMODE(os.stat(target).st_mode)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".ampkit", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise

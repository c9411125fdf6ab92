"""The codemod behind ``ampkit lint --fix``: apply the edits of fixable findings to a text.

Only rules that attach a :class:`~ampkit.lint.findings.Fix` are rewritten (today AMP006,
the deprecated ``torch.cuda.amp`` API); everything else in the file is left byte for byte.
Fixes are applied by source position, so formatting and comments elsewhere survive, and the
process repeats until nothing fixable is left, which makes ``--fix`` idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ampkit.lint.check import check_source
from ampkit.lint.discovery import read_source
from ampkit.lint.findings import Edit, Finding
from ampkit.lint.selection import Selection

__all__ = ["apply_fixes", "fix_file", "fix_source"]

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


def fix_file(path: Path, selection: Selection | None = None) -> int:
    """Apply safe fixes to a file in place (same encoding and line endings); return the count."""
    try:
        text, encoding = read_source(path)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
        return 0
    new, count = fix_source(text, str(path), selection)
    if count and new != text:
        path.write_bytes(new.encode(encoding))
    return count

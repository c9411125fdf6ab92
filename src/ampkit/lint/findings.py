"""The result type of the linter: :class:`Finding`, its :class:`Severity` and its :class:`Fix`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["Edit", "Finding", "Fix", "Severity"]


class Severity(str, enum.Enum):
    """How bad a finding is. ``error`` and ``warning`` make ``ampkit lint`` exit with 1."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def fails(self) -> bool:
        """Whether a finding of this severity makes the run fail (exit code 1)."""
        return self is not Severity.INFO


@dataclass(frozen=True, order=True)
class Edit:
    """Replace the characters ``[start, end)`` of a source text by ``content``.

    Offsets count characters (not bytes) from the start of the text; ``line``/``column``
    (1-based) and ``end_line``/``end_column`` locate the same span for humans and tools.
    """

    start: int
    end: int
    content: str
    line: int = 0
    column: int = 0
    end_line: int = 0
    end_column: int = 0

    def to_dict(self) -> dict[str, object]:
        """The JSON form of the edit."""
        return {
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "content": self.content,
        }


@dataclass(frozen=True)
class Fix:
    """A safe rewrite that removes a finding: one or more non-overlapping edits."""

    message: str
    edits: tuple[Edit, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """The JSON form of the fix."""
        return {"message": self.message, "edits": [e.to_dict() for e in self.edits]}


@dataclass(frozen=True)
class Finding:
    """One problem found at ``path:line:column`` (both 1-based) by the rule ``code``."""

    path: str
    line: int
    column: int
    code: str
    severity: Severity
    message: str
    fix: Fix | None = field(default=None, compare=False)

    @property
    def sort_key(self) -> tuple[str, int, int, str]:
        """Order findings by file, position and code."""
        return (self.path, self.line, self.column, self.code)

    def to_dict(self) -> dict[str, object]:
        """The JSON form of the finding (``fix`` only when one exists)."""
        data: dict[str, object] = {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
        }
        if self.fix is not None:
            data["fix"] = self.fix.to_dict()
        return data

"""The rule protocol and the registry of rules by code."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from ampkit.lint.findings import Finding, Severity

if TYPE_CHECKING:
    from ampkit.lint.analysis import FileAnalysis

__all__ = ["RULES", "Rule", "register"]

RULES: dict[str, type[Rule]] = {}


class Rule:
    """A check with a stable code. The class docstring is the rule's documentation.

    Subclasses set ``code``, ``name``, ``severity`` and ``summary`` and implement
    :meth:`check`; the docstring gives the rationale and a bad and a good example.
    """

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.ERROR
    summary: ClassVar[str] = ""

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        """Yield the findings of this rule in one analysed file."""
        return iter(())

    def finding(
        self, analysis: FileAnalysis, node: object, message: str, fix: object = None
    ) -> Finding:
        """A finding of this rule at ``node``."""
        return analysis.finding(self.code, self.severity, node, message, fix)  # type: ignore[arg-type]

    @classmethod
    def explain(cls) -> str:
        """The text ``ampkit lint --explain CODE`` prints."""
        head = f"{cls.code} {cls.name} ({cls.severity.value})"
        return (
            f"{head}\n{'=' * len(head)}\n\n{cls.summary}\n\n{inspect.cleandoc(cls.__doc__ or '')}\n"
        )


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator adding a rule to :data:`RULES` (codes must be unique)."""
    if cls.code in RULES:
        raise ValueError(
            f"duplicate rule code {cls.code}: {RULES[cls.code].__name__} and {cls.__name__}"
        )
    RULES[cls.code] = cls
    return cls


@register
class SyntaxErrorRule(Rule):
    """A file that cannot be parsed (or read) is reported once, at the place parsing stopped.

    The rest of the run goes on: one broken file never stops the linter.

    Bad::

        def train(:
            ...

    Good::

        def train():
            ...
    """

    code = "AMP000"
    name = "syntax-error"
    severity = Severity.ERROR
    summary = "The file could not be parsed, so it was not checked."

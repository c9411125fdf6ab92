"""Lint one source text or one file: parse, run every rule, apply selection and noqa."""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

from ampkit.lint.analysis import FileAnalysis
from ampkit.lint.discovery import MAX_FILE_BYTES, FileTooLargeError, read_source
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.project import ProjectView
from ampkit.lint.rules import all_rules
from ampkit.lint.selection import Selection
from ampkit.lint.source import SourceText, noqa_map

__all__ = ["analyse", "check_file", "check_source"]

#: A file mentioning none of these cannot trigger any rule, so only its syntax is checked.
_RELEVANT = re.compile(
    r"torch|scaler|backward|autocast|clip_grad|unscale_|half|bfloat16|float16|\.step\b|zero_grad|state_dict"
)


def _syntax_finding(path: str, exc: BaseException, line: int = 1, column: int = 1) -> Finding:
    return Finding(
        path, max(line, 1), max(column, 1), "AMP000", Severity.ERROR, f"file not checked: {exc}"
    )


def analyse(
    text: str, path: str = "<string>", project: ProjectView | None = None
) -> tuple[list[Finding], FileAnalysis | None]:
    """All findings of all rules for a source text (no selection or noqa applied yet);
    ``project`` resolves names imported from the other files of the linted tree."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        message = f"syntax error: {exc.msg}"
        return [_syntax_finding(path, Exception(message), exc.lineno or 1, exc.offset or 1)], None
    except (ValueError, RecursionError, MemoryError) as exc:
        return [
            _syntax_finding(path, Exception(f"cannot parse: {type(exc).__name__}: {exc}"))
        ], None
    if not _RELEVANT.search(text):
        return [], None
    try:
        analysis = FileAnalysis(tree, SourceText(text), path, project)
        findings: list[Finding] = []
        for rule_cls in all_rules():
            findings.extend(rule_cls().check(analysis))
    except RecursionError:
        return [_syntax_finding(path, Exception("code nested too deeply to analyse"))], None
    return findings, analysis


def _filter(findings: Iterable[Finding], text: str, selection: Selection | None) -> list[Finding]:
    noqa = noqa_map(text)
    kept: dict[tuple[str, int, int, str], Finding] = {}
    for finding in findings:
        if selection is not None and finding.code not in selection:
            continue
        if finding.line in noqa:
            codes = noqa[finding.line]
            if codes is None or finding.code in codes:
                continue
        kept.setdefault(finding.sort_key, finding)
    return sorted(kept.values(), key=lambda f: f.sort_key)


def check_source(
    text: str,
    path: str = "<string>",
    selection: Selection | None = None,
    project: ProjectView | None = None,
) -> list[Finding]:
    """Lint one Python source text and return its findings sorted by position.

    Never raises for bad input: a text that does not parse is one ``AMP000`` finding.
    ``project`` (a :class:`~ampkit.lint.project.ProjectView`) lets the analysis follow
    names the text imports from the other files of a linted tree.

    Example::

        >>> from ampkit.lint import check_source
        >>> [f.code for f in check_source("import torch\\nwith torch.autocast('cpu', dtype=torch.float16):\\n    pass\\n")]
        ['AMP009']
    """
    findings, _ = analyse(text, path, project)
    return _filter(findings, text, selection)


def check_file(
    path: Path,
    selection: Selection | None = None,
    display: str | None = None,
    max_bytes: int | None = MAX_FILE_BYTES,
    project: ProjectView | None = None,
) -> list[Finding]:
    """Lint one file; unreadable or undecodable files, and files over ``max_bytes`` (None:
    no limit), are one ``AMP000`` finding."""
    name = display or str(path)
    try:
        text, _ = read_source(path, max_bytes)
    except FileTooLargeError as exc:
        found = [_syntax_finding(name, Exception(f"too large to analyse: {exc}"))]
        return [f for f in found if selection is None or f.code in selection]
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as exc:
        found = [_syntax_finding(name, Exception(f"cannot read: {exc}"))]
        return [f for f in found if selection is None or f.code in selection]
    return check_source(text, name, selection, project)

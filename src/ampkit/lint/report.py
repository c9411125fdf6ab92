"""Formatters for findings: ``text`` (default), ``json``, ``sarif`` (2.1.0) and ``github``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib import metadata

from ampkit.lint.findings import Finding, Severity
from ampkit.lint.rules import all_rules

__all__ = ["FORMATS", "format_findings"]

_SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def format_text(findings: Sequence[Finding]) -> str:
    """``path:line:col: CODE message``, one finding per line (flake8/ruff style)."""
    return "".join(f"{f.path}:{f.line}:{f.column}: {f.code} {f.message}\n" for f in findings)


def format_json(findings: Sequence[Finding]) -> str:
    """A JSON array of objects with path, line, column, code, severity, message and fix."""
    return json.dumps([f.to_dict() for f in findings], indent=2) + "\n"


def _version() -> str:
    try:
        return metadata.version("ampkit")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def format_sarif(findings: Sequence[Finding]) -> str:
    """A SARIF 2.1.0 log with one run, the rule metadata and one result per finding."""
    rules = all_rules()
    index = {rule.code: i for i, rule in enumerate(rules)}
    driver = {
        "name": "ampkit-lint",
        "version": _version(),
        "rules": [
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": (rule.__doc__ or rule.summary).strip().splitlines()[0]},
                "help": {"text": rule.explain()},
                "defaultConfiguration": {"level": _SARIF_LEVEL[rule.severity]},
            }
            for rule in rules
        ],
    }
    results = []
    for f in findings:
        result: dict[str, object] = {
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, 0),
            "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.path.replace("\\", "/")},
                        "region": {"startLine": f.line, "startColumn": f.column},
                    }
                }
            ],
        }
        if f.fix is not None:
            result["fixes"] = [
                {
                    "description": {"text": f.fix.message},
                    "artifactChanges": [
                        {
                            "artifactLocation": {"uri": f.path.replace("\\", "/")},
                            "replacements": [
                                {
                                    "deletedRegion": {
                                        "startLine": e.line,
                                        "startColumn": e.column,
                                        "endLine": e.end_line,
                                        "endColumn": e.end_column,
                                    },
                                    "insertedContent": {"text": e.content},
                                }
                                for e in f.fix.edits
                            ],
                        }
                    ],
                }
            ]
        results.append(result)
    log = {
        "$schema": _SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "results": results}],
    }
    return json.dumps(log, indent=2) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(findings: Sequence[Finding]) -> str:
    """GitHub Actions workflow commands: ``::error file=...,line=...,col=...,title=CODE::message``."""
    lines = []
    for f in findings:
        props = f"file={_escape_property(f.path)},line={f.line},col={f.column},title={_escape_property(f.code)}"
        lines.append(f"::{_GITHUB_LEVEL[f.severity]} {props}::{_escape_data(f.message)}\n")
    return "".join(lines)


FORMATS: dict[str, Callable[[Sequence[Finding]], str]] = {
    "text": format_text,
    "json": format_json,
    "sarif": format_sarif,
    "github": format_github,
}


def format_findings(findings: Sequence[Finding], fmt: str = "text") -> str:
    """Render findings in one of :data:`FORMATS`."""
    return FORMATS[fmt](findings)

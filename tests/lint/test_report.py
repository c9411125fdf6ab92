"""Formatters: escaping, SARIF fixes and rule metadata, JSON shape."""

from __future__ import annotations

import json

from ampkit.lint import Finding, Severity, check_source
from ampkit.lint.report import FORMATS, format_findings

ODD = Finding("dir,x/a:b.py", 3, 7, "AMP001", Severity.ERROR, "50% of\nthe message")


def test_github_escapes_properties_and_data() -> None:
    out = format_findings([ODD], "github")
    assert (
        out == "::error file=dir%2Cx/a%3Ab.py,line=3,col=7,title=AMP001::50%25 of%0Athe message\n"
    )


def test_github_levels() -> None:
    findings = [
        Finding("a.py", 1, 1, "AMP006", Severity.WARNING, "w"),
        Finding("a.py", 2, 1, "AMP012", Severity.INFO, "i"),
    ]
    lines = format_findings(findings, "github").splitlines()
    assert lines[0].startswith("::warning ") and lines[1].startswith("::notice ")


def test_text_format_is_flake8_style() -> None:
    assert format_findings([ODD], "text").startswith("dir,x/a:b.py:3:7: AMP001 50% of")


def test_sarif_carries_fixes_and_levels() -> None:
    findings = check_source("import torch\ns = torch.cuda.amp.GradScaler()\n", "t.py")
    log = json.loads(format_findings(findings, "sarif"))
    (result,) = log["runs"][0]["results"]
    assert result["level"] == "warning"
    (fix,) = result["fixes"]
    replacements = fix["artifactChanges"][0]["replacements"]
    assert {r["insertedContent"]["text"] for r in replacements} == {
        "torch.amp.GradScaler",
        '"cuda"',
    }
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    backward = next(r for r in rules if r["id"] == "AMP012")
    assert backward["defaultConfiguration"]["level"] == "warning"
    assert all(r["shortDescription"]["text"] and r["help"]["text"] for r in rules)


def test_empty_outputs() -> None:
    assert format_findings([], "text") == ""
    assert json.loads(format_findings([], "json")) == []
    assert json.loads(format_findings([], "sarif"))["runs"][0]["results"] == []
    assert format_findings([], "github") == ""
    assert set(FORMATS) == {"text", "json", "sarif", "github"}


def test_json_keys_and_columns_count_characters() -> None:
    text = "import torch\nnom = 'é'; s = torch.cuda.amp.GradScaler()\n"
    (item,) = json.loads(format_findings(check_source(text, "t.py"), "json"))
    assert list(item)[:6] == ["path", "line", "column", "code", "severity", "message"]
    assert item["column"] == text.splitlines()[1].index("torch") + 1

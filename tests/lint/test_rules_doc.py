"""Rule codes are unique, documented (rationale + bad/good example) and listed in the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ampkit.lint import RULES, Severity
from ampkit.lint.docs import rules_markdown
from ampkit.lint.rules import all_rules
from ampkit.lint.rules.base import Rule, register

ROOT = Path(__file__).resolve().parents[2]
SPEC = {
    "AMP001": "error", "AMP002": "error", "AMP003": "error", "AMP004": "error", "AMP005": "error",
    "AMP006": "warning", "AMP007": "warning", "AMP008": "warning", "AMP009": "warning",
    "AMP010": "error", "AMP011": "warning", "AMP012": "warning", "AMP013": "warning", "AMP014": "error",
    "AMP015": "error", "AMP016": "error", "AMP017": "warning",
}  # fmt: skip


def test_codes_and_severities_match_the_spec() -> None:
    assert {c: r.severity.value for c, r in RULES.items() if c != "AMP000"} == SPEC
    assert RULES["AMP000"].severity is Severity.ERROR


def test_codes_are_unique_and_well_formed() -> None:
    codes = [rule.code for rule in all_rules()]
    names = [rule.name for rule in all_rules()]
    assert len(codes) == len(set(codes)) and len(names) == len(set(names))
    assert all(re.fullmatch(r"AMP\d{3}", c) for c in codes)


def test_registering_a_duplicate_code_fails() -> None:
    class Duplicate(Rule):
        code = "AMP001"

    with pytest.raises(ValueError, match="duplicate rule code AMP001"):
        register(Duplicate)


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_is_documented(rule: type[Rule]) -> None:
    doc = rule.__doc__ or ""
    assert rule.summary and rule.name
    assert "Bad::" in doc and "Good::" in doc
    assert len(doc.split("Bad::")[0].split()) >= 12, "rationale too short"
    assert rule.code in rule.explain() and "Good::" in rule.explain()


def test_docs_page_lists_every_rule_and_is_current() -> None:
    page = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    for rule in all_rules():
        assert f"### {rule.code}" in page
    assert page == rules_markdown(), "regenerate with: python -m ampkit.lint.docs docs/lint.md"


def test_pre_commit_hook_definition() -> None:
    text = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert "- id: ampkit-lint\n" in text
    assert "entry: ampkit lint\n" in text
    assert "language: python" in text and "types: [python]" in text

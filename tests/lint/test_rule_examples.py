"""Every rule's documented examples run through the linter.

The Bad and Good blocks of a rule docstring are what ``ampkit lint --explain`` prints and
what ``docs/lint.md`` shows. A Bad example must produce findings of exactly that rule and
no other; a Good example must produce no finding at all.
"""

from __future__ import annotations

import pytest

from ampkit.lint import check_source
from ampkit.lint.docs import rule_examples
from ampkit.lint.rules import Rule, all_rules

EXAMPLES = [
    pytest.param(rule, label, code, id=f"{rule.code}-{label}-{i}")
    for rule in all_rules()
    for i, (label, code) in enumerate(rule_examples(rule))
]


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_has_bad_and_good_examples(rule: type[Rule]) -> None:
    labels = [label for label, _ in rule_examples(rule)]
    assert any(label.startswith("Bad") for label in labels), labels
    assert any(label.startswith("Good") for label in labels), labels


@pytest.mark.parametrize(("rule", "label", "code"), EXAMPLES)
def test_documented_example(rule: type[Rule], label: str, code: str) -> None:
    codes = {f.code for f in check_source(code, f"{rule.code}-example.py")}
    if label.startswith("Bad"):
        assert codes == {rule.code}, f"{label} example of {rule.code} gives {sorted(codes)}"
    else:
        assert label.startswith("Good"), f"unexpected example label {label!r} in {rule.code}"
        assert codes == set(), f"{label} example of {rule.code} gives {sorted(codes)}"

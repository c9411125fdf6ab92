"""Golden files: every ``cases/*.py`` yields exactly the ``# expect: CODE`` findings it marks.

``AMPxxx_bad.py`` holds the mistakes a rule must find, ``AMPxxx_good.py`` the corrected
shapes it must not report, and ``clean_*.py`` realistic correct training scripts that must
produce nothing at all.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ampkit.lint import RULES, check_source

CASES = Path(__file__).parent / "cases"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>AMP\d{3}(?:\s*,\s*AMP\d{3})*)")


def expected(text: str) -> set[tuple[str, int]]:
    """The ``(code, line)`` pairs marked with ``# expect:`` comments."""
    found: set[tuple[str, int]] = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            found |= {(code.strip(), lineno) for code in match.group("codes").split(",")}
    return found


@pytest.mark.parametrize("path", sorted(CASES.glob("*.py")), ids=lambda p: p.name)
def test_golden_case(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    got = {(f.code, f.line) for f in check_source(text, str(path))}
    assert got == expected(text)


def test_clean_scripts_exist() -> None:
    assert len(list(CASES.glob("clean_*.py"))) >= 5


@pytest.mark.parametrize("code", sorted(c for c in RULES if c != "AMP000"))
def test_every_rule_has_bad_and_good_case(code: str) -> None:
    bad = CASES / f"{code}_bad.py"
    good = CASES / f"{code}_good.py"
    assert bad.exists() and good.exists()
    assert any(c == code for c, _ in expected(bad.read_text(encoding="utf-8")))
    assert not any(c == code for c, _ in expected(good.read_text(encoding="utf-8")))

"""``benchmarks/lint_real_expectations.json`` holds only facts, in the shape the scorer reads.

The measurement itself (``benchmarks/lint_real.py score``) needs checkouts of public
repositories and is not part of the test suite; this checks the file it scores against.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ampkit.lint import RULES

FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "lint_real_expectations.json"
NEW = FILE.with_name("lint_real_new_expectations.json")
THIRD = FILE.with_name("lint_real_third_expectations.json")
FIELDS = {"repo", "commit", "path", "line", "rule", "verdict", "reason"}
VERDICTS = {"true_positive", "false_positive", "missed_bug", "real_bug"}


@pytest.mark.parametrize("file", [FILE, NEW, THIRD], ids=lambda p: p.stem)
def test_expectations_are_facts_about_pinned_repositories(file: Path) -> None:
    data = json.loads(file.read_text(encoding="utf-8"))
    repos = {r["repo"]: r["commit"] for r in data["repositories"]}
    assert len(repos) >= 15
    assert all(re.fullmatch(r"[0-9a-f]{40}", c) for c in repos.values())
    seen = set()
    for entry in data["verdicts"]:
        assert set(entry) == FIELDS, entry
        assert repos[entry["repo"]] == entry["commit"]
        assert entry["verdict"] in VERDICTS and entry["rule"] in RULES
        assert isinstance(entry["line"], int) and entry["line"] > 0
        assert not entry["path"].startswith("/") and ".." not in entry["path"]
        assert "\n" not in entry["reason"] and len(entry["reason"]) < 300
        key = (entry["repo"], entry["path"], entry["line"], entry["rule"])
        assert key not in seen, key
        seen.add(key)


def test_there_are_real_bugs_and_false_positives_to_score() -> None:
    verdicts = json.loads(FILE.read_text(encoding="utf-8"))["verdicts"]
    behavioural = [v for v in verdicts if v["rule"] not in ("AMP000", "AMP006")]
    real = [v for v in behavioural if v["verdict"] != "false_positive"]
    assert len(real) >= 15 and len(behavioural) - len(real) >= 50


def test_the_new_set_shares_no_repository_with_the_regression_set() -> None:
    """The set the linter was not tuned on is scored apart, so no repository is in both."""
    old = {r["repo"] for r in json.loads(FILE.read_text(encoding="utf-8"))["repositories"]}
    new = {r["repo"] for r in json.loads(NEW.read_text(encoding="utf-8"))["repositories"]}
    assert len(new) >= 20
    assert not old & new


def test_the_third_set_shares_no_repository_with_the_other_two() -> None:
    """The third set is the one read before the linter ran on it: no repository of the
    sets the rules were tuned on is in it."""
    seen = {
        r["repo"]
        for f in (FILE, NEW)
        for r in json.loads(f.read_text(encoding="utf-8"))["repositories"]
    }
    third = {r["repo"] for r in json.loads(THIRD.read_text(encoding="utf-8"))["repositories"]}
    assert len(third) >= 10
    assert not seen & third

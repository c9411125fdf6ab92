"""``benchmarks/lint_real_expectations.json`` holds only facts, in the shape the scorer reads.

The measurement itself (``benchmarks/lint_real.py score``) needs checkouts of public
repositories and is not part of the test suite; this checks the file it scores against.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ampkit.lint import RULES

FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "lint_real_expectations.json"
FIELDS = {"repo", "commit", "path", "line", "rule", "verdict", "reason"}
VERDICTS = {"true_positive", "false_positive", "missed_bug"}


def test_expectations_are_facts_about_pinned_repositories() -> None:
    data = json.loads(FILE.read_text(encoding="utf-8"))
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

"""``ampkit train`` reads the precision's spelling once, from the command line to the summary:
the settings check, the policy, the mode and the summary share that one reading."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

import ampkit.job.job  # noqa: F401  (the callers are imported before the parser is counted)
import ampkit.precision.engine  # noqa: F401
import ampkit.trainer.trainer  # noqa: F401
from ampkit.cli import main
from ampkit.precision import spelling

TINY = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--log-every", "1"]
TINY += ["--n-layer", "1", "--n-embd", "32", "--no-progress"]


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the parser by a counting one in every module that holds it (they import it by
    name); return the list each call appends its spelling to."""
    parse = spelling.parse_precision
    seen: list[str] = []

    def counting(spelled: str) -> spelling.ParsedPrecision:
        seen.append(spelled)
        return parse(spelled)

    holders = [
        m for m in list(sys.modules.values()) if getattr(m, "parse_precision", None) is parse
    ]
    assert len(holders) >= 3  # spelling, policy, the modes' base at least
    for module in holders:
        monkeypatch.setattr(module, "parse_precision", counting)
    return seen


@pytest.mark.parametrize(
    "precision",
    [
        ["--precision", "bf16-mixed"],
        ["--precision", "bf16-true", "--state-precision", "bf16-stochastic"],
        ["--precision", "bf16-true", "--update-compensation", "stochastic"],
        ["--precision", "fp32"],
        [],  # auto
    ],
)
def test_a_run_parses_its_precision_once(tmp_path, monkeypatch, precision):
    seen = _count_parses(monkeypatch)
    result = CliRunner().invoke(main, ["train", *TINY, "--out", str(tmp_path), *precision])
    assert result.exit_code == 0, result.output
    assert seen == [precision[1] if precision else "auto"]  # was 3 (5 with a bf16-true option)


def test_the_counter_sees_every_parse(monkeypatch):
    """The counting parser is the one called: two direct reads count two."""
    seen = _count_parses(monkeypatch)
    from ampkit.precision.policy import analysis_policy

    analysis_policy("bf16", "cpu")
    ampkit.precision.policy.parse_precision("fp16")
    assert seen == ["bf16", "fp16"]

"""``ampkit report``: the page, the plots as files, JSON on stdout, one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from ampkit.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from report_runs import noisy_curve, write_run  # noqa: E402


def test_report_writes_the_page_the_pngs_and_json_on_stdout(tmp_path):
    a = write_run(tmp_path / "fp32", noisy_curve(0))
    b = write_run(tmp_path / "bf16", noisy_curve(1), precision="bf16")
    page, pngs = tmp_path / "out" / "report.html", tmp_path / "png"
    result = CliRunner().invoke(
        main, ["report", str(a), str(b), "--out", str(page), "--png", str(pngs), "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (verdict,) = data["verdicts"]
    assert verdict["label"] == "bf16" and verdict["reference"] == "fp32"
    assert verdict["verdict"] == "within noise" and "Noise:" in data["method"]
    assert "bf16 vs fp32: within noise" in result.stderr
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in pngs.iterdir())[:2] == ["grad_norm.png", "loss.png"]


def test_a_missing_run_is_one_line_and_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"ampkit: error: runs: {tmp_path / 'nope'} does not exist. Pass a run folder (ampkit "
        "train --out DIR) or its metrics.jsonl."
    ]


def test_labels_must_match_the_runs_before_any_work(tmp_path):
    a = write_run(tmp_path / "a", [3.0, 2.0])
    result = CliRunner().invoke(main, ["report", str(a), "--label", "x", "--label", "y"])
    assert result.exit_code == 2 and "--label: 2 given for 1 runs" in result.output
    result = CliRunner().invoke(main, ["report", str(a), "--png", str(a / "metrics.jsonl")])
    assert result.exit_code == 2 and "'--png'" in result.output and "is a file" in result.output

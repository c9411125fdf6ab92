"""``ampkit compare``: the built-in GPT in fp32 against bf16, record and replay across
processes, one-line errors before any work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ampkit.cli import main


def test_gpt_bf16_parts_nowhere_and_writes_json_and_html(tmp_path):
    page = tmp_path / "out" / "compare.html"
    result = CliRunner().invoke(
        main,
        ["compare", "--model", "gpt", "--batch-size", "1", "--a", "fp32", "--b", "bf16"]
        + ["--json", "-", "--html", str(page)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["a"] == "fp32" and data["b"] == "bf16" and data["first"] is None
    assert data["meta_b"]["compute_dtype"] == "bfloat16" and data["meta_a"]["model"] == "gpt"
    assert "forward: no module parts beyond the tolerance" in result.stderr
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert text.count("src='data:image/png;base64,") == 1


@pytest.mark.slow  # two more processes, each importing torch and building the GPT
def test_sides_recorded_in_two_processes_compare_from_their_folders(tmp_path):
    for setting, folder in (("fp32", "a"), ("bf16", "b")):
        subprocess.run(
            [sys.executable, "-m", "ampkit", "compare", "--model", "gpt", "--batch-size", "1"]
            + ["--a", setting, "--record", str(tmp_path / folder)],
            check=True,
            capture_output=True,
        )
    replay = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    live = CliRunner().invoke(
        main, ["compare", "--model", "gpt", "--batch-size", "1", "--a", "fp32", "--b", "bf16"]
    )
    assert replay.exit_code == live.exit_code == 0, replay.output
    assert replay.output == live.output  # the same numbers, from files or in one process


def test_usage_mistakes_are_one_line_and_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["compare", "--b", "bf61"])
    assert result.exit_code == 2
    assert result.output.startswith("ampkit: error: --b: unknown precision 'bf61'")
    assert len(result.output.strip().splitlines()) == 1
    result = CliRunner().invoke(main, ["compare", str(tmp_path)])
    assert result.exit_code == 2 and "RECORDS: 1 folder(s) given" in result.output
    result = CliRunner().invoke(main, ["compare", str(tmp_path), str(tmp_path)])
    assert result.exit_code == 2 and "holds no comparison record" in result.output

"""``ampkit train --config FILE.toml`` and ``--print-config``: a run reproducible from one file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ampkit.cli import main

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+")


def invoke(*args: str):
    return CliRunner().invoke(main, ["train", *args])


def test_print_config_reads_back_to_the_same_settings(tmp_path):
    first = invoke("--steps", "7", "--keep-fp32", "head", "--max-grad-norm", "0", "--print-config")
    assert first.exit_code == 0, first.output
    settings = tomllib.loads(first.output)
    assert settings["steps"] == 7 and settings["keep_fp32"] == ["head"]
    assert settings["max_grad_norm"] == 0  # clipping off survives the round trip
    path = tmp_path / "run.toml"
    path.write_text(first.output, encoding="utf-8")
    again = invoke("--config", str(path), "--print-config")
    assert again.exit_code == 0 and again.output == first.output


def test_the_command_line_overrides_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('steps = 7\nseq-len = 32\nprecision = "fp32"\nwarmup_steps = 3\n')
    settings = tomllib.loads(invoke("--steps", "2", "--config", str(path), "--print-config").output)
    assert (settings["steps"], settings["seq_len"], settings["precision"]) == (2, 32, "fp32")
    assert settings["warmup_steps"] == 3  # a setting with no option of its own


def test_bad_files_are_one_line_and_exit_2_before_any_work(tmp_path):
    cases = {
        "stepz = 3\n": "unknown setting 'stepz'",
        "steps = \n": "is not valid TOML",
        "[train]\nsteps = 3\n": "is a table",
        'steps = "many"\n': "steps",
    }
    for text, expected in cases.items():
        path = tmp_path / "bad.toml"
        path.write_text(text)
        result = invoke("--config", str(path))
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and expected in lines[0], result.output
    missing = invoke("--config", str(tmp_path / "none.toml"))
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_a_run_from_a_file_records_the_effective_settings(tmp_path):
    path = tmp_path / "run.toml"
    out = tmp_path / "out"
    path.write_text(
        f'steps = 3\nbatch-size = 4\nseq-len = 16\nprecision = "fp32"\nlog-every = 1\n'
        f"warmup_steps = 1\nprogress = false\nout = {json.dumps(str(out))}\n"
    )
    result = invoke("--config", str(path), "--lr", "0.001")
    assert result.exit_code == 0, result.output
    recorded = json.loads((out / "summary.json").read_text())["config"]
    assert (recorded["steps"], recorded["seq_len"], recorded["warmup_steps"]) == (3, 16, 1)
    assert recorded["lr"] == 0.001
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


def test_state_precision_is_a_key_of_the_file_and_of_print_config(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('precision = "bf16-true"\nstate-precision = "bf16-kahan"\n')
    printed = invoke("--config", str(path), "--print-config")
    assert printed.exit_code == 0, printed.output
    assert tomllib.loads(printed.output)["state_precision"] == "bf16-kahan"
    assert "state_precision" not in tomllib.loads(invoke("--print-config").output)  # default
    path.write_text('precision = "bf16"\nstate_precision = "bf16-kahan"\n')
    refused = invoke("--config", str(path), "--steps", "1")
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert refused.exit_code == 2 and len(lines) == 1
    assert "--state-precision applies to --precision bf16-true only" in lines[0]

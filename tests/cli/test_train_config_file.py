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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("steps = 1.5\n", "steps: expected an integer, got a float (1.5)"),
        ("steps = true\n", "steps: expected an integer, got a boolean (true)"),
        ("lr = true\n", "lr: expected a number, got a boolean (true)"),
        ('lr = "1e-3"\n', "lr: expected a number, got a string ('1e-3')"),
        (
            "steps = 1979-05-27\n",
            "steps: expected an integer, got a TOML date or time (1979-05-27)",
        ),
        ("dist-timeout = [1, 2]\n", "dist-timeout: expected a number, got an array ([1, 2])"),
        ('keep_fp32 = "head"\n', "keep_fp32: expected an array of strings, got a string ('head')"),
        ("keep_fp32 = [1]\n", "keep_fp32: expected an array of strings, got an array holding"),
        ("nproc = 2.0\n", "nproc: expected an integer, got a float (2.0)"),
        ("overwrite = 1\n", "overwrite: expected true or false, got an integer (1)"),
        ("warmup_steps = 2.5\n", "warmup_steps: expected an integer, got a float (2.5)"),
        ("batch_size = 4\nbatch-size = 8\n", "'batch_size' and 'batch-size' are the same setting"),
    ],
)
def test_a_value_of_the_wrong_kind_is_one_line_and_exit_2(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = invoke("--config", str(path), "--print-config")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and expected in lines[0], result.output


def test_an_infinite_dist_timeout_is_refused_before_any_work():
    for value in ("inf", "nan", "0", "-1"):
        result = invoke("--dist-timeout", value, "--print-config")
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert "--dist-timeout must be a positive number of seconds, finite" in lines[0]


def _other_value(row) -> list[str]:
    """Command-line arguments that set ``row`` to a valid value other than its default."""
    if row.type is bool:
        return ["--no-compile"] if row.name == "compile" else [row.option]
    if row.choices:
        return [row.option, next(c for c in row.choices if c != row.default)]
    if row.name in ("n_embd", "n_head"):
        return [row.option, "64" if row.name == "n_embd" else "8"]
    if row.mode_option and row.type is float:
        return [
            row.option,
            str(row.unset_means / 2),
        ]  # half the mode's default (a share stays <= 1)
    if row.type in (int, float):
        return [row.option, str((row.default or 1) + 1)]
    return [row.option, "x" if row.name != "precision" else "bf16-true"]


def test_print_config_reads_back_through_config_for_every_option(tmp_path):
    """Every row of the settings table, set to another value on the command line, survives
    --print-config -> --config -> --print-config unchanged (what is printed is accepted)."""
    from ampkit.job.config import settings
    from ampkit.precision.modes import cli_options

    compatible = {  # options that need a partner to be valid
        # a mode's option: the precision of the (first) mode that takes it
        **{name: ["--precision", owners[0]] for name, (_, owners) in cli_options().items()},
        "allow_precision_change": ["--resume", "auto", "--out", str(tmp_path / "o")],
        "resume": ["--out", str(tmp_path / "o")],
        "checkpoint_every": ["--out", str(tmp_path / "o")],
        "keep_last": ["--out", str(tmp_path / "o")],
        **{name: ["--eval-data", "x"] for name in ("eval_every", "metric", "patience")},
        "keep_best": ["--eval-data", "x", "--out", str(tmp_path / "o")],
    }
    rows = [row for row in settings() if row.option is not None]
    assert len(rows) >= 25
    for row in rows:
        args = [*_other_value(row), *compatible.get(row.name, [])]
        first = invoke(*args, "--print-config")
        assert first.exit_code == 0, (row.name, first.output)
        printed = tomllib.loads(first.output)
        assert printed[row.name] != (list(row.default) if row.many else row.default), row.name
        path = tmp_path / f"{row.name}.toml"
        path.write_text(first.output, encoding="utf-8")
        again = invoke("--config", str(path), "--print-config")
        assert again.exit_code == 0 and again.output == first.output, (row.name, again.output)

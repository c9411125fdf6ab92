"""``ampkit bench`` end to end, in-process, and its bad-input paths."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from ampkit.cli import main

FAST = [  # exactly 3 rounds: these tests read the table, not the sampling
    "--steps",
    "3",
    "--budget",
    "0",
    "--warmup",
    "1",
    "--probe-tolerance",
    "100",
    "--no-progress",
    "--device",
    "cpu",
]


def invoke(*args: str, catch: bool = False):
    return CliRunner().invoke(main, ["bench", *args], catch_exceptions=catch)


def test_table_json_and_plot(user_models, tmp_path):
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    result = invoke(
        "--model",
        f"{user_models}:tiny",
        "--precisions",
        "fp32,bf16",
        *FAST,
        "--batch-size",
        "4",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    )
    assert result.exit_code == 0, result.output
    for needle in (
        "variant",
        "cpu ms",
        "wall ms",
        "samples/s",
        "vs fp32",
        "saved for bwd",
        "loss",
        "gap",
        "fp32",
        "bf16",
    ):
        assert needle in result.output
    assert "MFU" not in result.output  # CUDA only
    data = json.loads(out_json.read_text())
    assert (
        data["verdict"]["text"] in result.output.replace("\n", " ")
        or data["verdict"]["text"] in result.output
    )
    assert [v["name"] for v in data["variants"]] == ["fp32", "bf16"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_precisions_on_this_machine_measure_a_low_precision(user_models):
    import torch

    from ampkit.bench import default_precisions
    from ampkit.precision.hardware import probe

    expected = default_precisions(probe(torch.device("cpu")))
    result = invoke("--model", f"{user_models}:tiny", *FAST)
    assert result.exit_code == 0, result.output
    assert len(expected) == 2 and expected[0] == "fp32"
    rows = [line.split()[0] for line in result.output.splitlines() if line[:4] in ("fp32", "bf16")]
    assert rows[:2] == expected


def test_plot_without_matplotlib_is_a_one_line_error(user_models, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = invoke(
        "--model",
        f"{user_models}:tiny",
        "--precisions",
        "fp32",
        *FAST,
        "--plot",
        str(tmp_path / "p.png"),
        catch=True,
    )
    assert result.exit_code == 2
    assert "pip install 'ampkit[bench]'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--precisions", "fp32,bf61"], "Did you mean 'bf16'?"),
        (["--precisions", ","], "names no precision"),
        (["--model", "resnet"], "--model: 'resnet' is not a model"),
        (["--model", "no_such_module_xyz:build"], "cannot import module"),
        (["--steps", "2"], "--steps must be an integer >= 3"),
        (["--budget", "-1"], "--budget must be a number of seconds >= 0"),
        (["--budget", "inf"], "--budget must be a number of seconds >= 0"),
        (["--model", "gpt", "--channels-last"], "--channels-last"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(args, needle):
    result = invoke(*FAST, *args, catch=True)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("ampkit: error:")]
    assert len(errors) == 1


def test_help_has_examples():
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0 and "Examples:" in result.output
    assert "--precisions" in result.output and "--channels-last" in result.output

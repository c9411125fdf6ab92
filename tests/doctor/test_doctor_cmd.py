"""``ampkit doctor`` in-process: output, files, and one-line errors for user mistakes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ampkit.cli import main


def _run(*args: str):
    return CliRunner().invoke(main, ["doctor", *args])


def test_help_has_examples():
    result = _run("--help")
    assert result.exit_code == 0
    assert "Examples:" in result.output and "--model" in result.output


def test_user_model_findings_recommendation_and_json(tmp_path):
    out = tmp_path / "doctor.json"
    result = _run("--model", "doctor_models:overflowing", "--steps", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "[overflow, forward] mid (Linear)" in result.output
    assert "precision  bf16" in result.output
    assert "precision map (dtypes under fp16 autocast)" in result.output
    data = json.loads(out.read_text())
    assert [(f["module"], f["kind"]) for f in data["findings"]] == [("mid", "overflow")]


def test_metrics_history_goes_into_the_html(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    rows = [
        {"step": s, "loss": 1.0 / s, "scale": 65536.0 / (1 + (s > 2)), "skipped": s == 3}
        for s in range(1, 6)
    ]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    page = tmp_path / "r.html"
    result = _run(
        "--model",
        "doctor_models:healthy",
        "--steps",
        "1",
        "--no-map",
        "--metrics",
        str(metrics),
        "--html",
        str(page),
    )
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "Loss-scale history" in text and "precision map" not in result.output


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nocolon", "'nocolon' is not a model. Use gpt, convnet, hf:<name>"),
        ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
        ("doctor_models:overflowin", "has no function 'overflowin'. Did you mean 'overflowing'?"),
        ("doctor_models:not_a_case", "returned a Linear. It must return (model, closure)"),
    ],
)
def test_model_spec_mistakes_are_one_line_errors(spec, message):
    result = _run("--model", spec)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_bad_metrics_and_steps_are_one_line_errors(tmp_path):
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"step": 1}\n')
    result = _run("--model", "doctor_models:healthy", "--metrics", str(bad))
    assert result.exit_code == 2 and "has no 'step' and 'scale'" in result.output
    result = _run("--steps", "0")
    assert result.exit_code == 2 and "--steps: 0 is invalid" in result.output
    result = _run("--model", "doctor_models:healthy", "--precision", "fp17")
    assert result.exit_code == 2 and "unknown precision 'fp17'" in result.output
    assert "Traceback" not in result.output


def test_builtin_gpt_runs_clean_in_fp16():
    result = _run("--steps", "1", "--no-map")
    assert result.exit_code == 0, result.output
    assert "findings: none" in result.output
    assert "blocks.1.mlp.fc" in result.output


def test_findings_only_prints_findings_and_the_recommendation():
    result = _run("--model", "doctor_models:overflowing", "--steps", "1", "--findings-only")
    assert result.exit_code == 0, result.output
    assert result.output.index("[overflow, forward] mid") < result.output.index("recommendation:")
    assert "per module" not in result.output and "precision map" not in result.output

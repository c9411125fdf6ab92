"""The doctor sections a mode adds, computed by the library: ``ampkit doctor --json`` carries
the fp8 plan and the lost-updates figures, and ``"precision"`` is the one requested."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner
from torch import nn

import ampkit
from ampkit.cli import main


def mlp():
    """The ``--model`` factory of these tests: (model, closure)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    x = torch.randn(16, 32)
    return model, lambda: model(x).pow(2).mean()


def _doctor(tmp_path, precision: str) -> tuple[str, dict]:
    out = tmp_path / f"{precision}.json"
    result = CliRunner().invoke(
        main,
        [
            "doctor",
            "--model",
            "test_mode_doctor:mlp",
            "--precision",
            precision,
            "--steps",
            "1",
            "--no-map",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out.read_text())


def test_doctor_json_carries_the_fp8_plan_and_the_requested_precision(tmp_path):
    output, data = _doctor(tmp_path, "fp8-rowwise")
    assert data["precision"] == "fp8" and data["measured_as"] == "bf16"
    plan = data["fp8_plan"]
    assert plan["recipe"] == "rowwise"
    assert [layer["name"] for layer in plan["layers"]] == ["0", "2"]
    assert [layer["tokens"] for layer in plan["layers"]] == [16, 16]
    assert "lost_updates" not in data
    assert "ampkit doctor: fp8 (numerics of bf16 autocast) on cpu" in output
    assert "fp8 plan (rowwise; no CUDA" in output


def test_doctor_json_carries_the_lost_updates_figures(tmp_path):
    output, data = _doctor(tmp_path, "bf16-true")
    assert data["precision"] == "bf16-true" and data["measured_as"] == "bf16"
    lost = data["lost_updates"]
    assert set(lost["overall"]) == {"none", "kahan", "stochastic"}
    assert lost["steps"] == 1 and lost["lr"] == 0.002
    assert lost["overall"]["kahan"] <= lost["overall"]["none"]
    assert "fp8_plan" not in data
    assert "lost updates in bf16-true (1 AdamW steps, lr 0.002" in output


def test_doctor_json_of_a_mixed_precision_has_no_sections(tmp_path):
    _, data = _doctor(tmp_path, "bf16-mixed")
    assert data["precision"] == "bf16" and data["measured_as"] == "bf16"
    assert "fp8_plan" not in data and "lost_updates" not in data


def test_diagnose_takes_a_mode_object_and_appends_its_sections():
    model, closure = mlp()
    report = ampkit.diagnose(model, closure, ampkit.Fp8("rowwise"), steps=1)
    assert report.precision == "fp8" and report.measured_format == "bf16"
    # the mode's sections, then the dtype contract every report carries
    assert [s.key for s in report.sections] == ["fp8_plan", "dtype_contract"]
    assert report.to_dict()["fp8_plan"] == report.sections[0].to_dict()
    assert report.to_text().endswith(report.sections[-1].to_text())
    plain = ampkit.diagnose(model, closure, "fp16", steps=1)
    assert [s.key for s in plain.sections] == ["dtype_contract"]
    assert plain.to_dict()["measured_as"] == "fp16"

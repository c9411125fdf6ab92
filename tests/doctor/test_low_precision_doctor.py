"""``ampkit doctor --precision fp8 / bf16-true`` and the lost-updates probe."""

from __future__ import annotations

import torch
from click.testing import CliRunner
from torch import nn

from ampkit.cli import main
from ampkit.doctor import probe_lost_updates


def test_probe_lost_updates_restores_the_model_and_separates_compensations():
    model = nn.Linear(8, 8)
    with torch.no_grad():
        model.weight.fill_(1.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 8)
    report = probe_lost_updates(
        model, lambda: model(x).pow(2).mean(), steps=2, lr=1e-5, keep_fp32=()
    )
    assert report.overall["none"] > 0.9 and report.overall["kahan"] == 0.0
    assert set(report.per_tensor["none"]) == {"weight", "bias"}
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert model.weight.dtype == torch.float32 and model.weight.grad is None
    assert "warning: with update_compensation='none'" in report.to_text()


def test_doctor_cli_prints_the_fp8_plan_and_the_lost_updates_probe():
    runner = CliRunner()
    fp8 = runner.invoke(
        main,
        [
            "doctor",
            "--model",
            "doctor_models:healthy",
            "--precision",
            "fp8-rowwise",
            "--steps",
            "1",
            "--no-map",
        ],
    )
    assert fp8.exit_code == 0, fp8.output
    assert "fp8 plan (rowwise; no CUDA" in fp8.output and "e5m2 grad lost" in fp8.output
    bf16_true = runner.invoke(
        main,
        [
            "doctor",
            "--model",
            "doctor_models:healthy",
            "--precision",
            "bf16-true",
            "--steps",
            "1",
            "--no-map",
        ],
    )
    assert bf16_true.exit_code == 0, bf16_true.output
    assert "lost updates in bf16-true (1 AdamW steps, lr 0.002" in bf16_true.output

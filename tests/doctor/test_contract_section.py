"""ampkit doctor shows the dtype contract of the model (and optimizer) it diagnosed."""

from __future__ import annotations

import torch
from torch import nn

from ampkit.doctor import diagnose


def test_report_shows_the_contract_under_the_candidates_autocast():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(4, 8)

    def closure() -> torch.Tensor:
        return model(x).pow(2).mean()

    report = diagnose(model, closure, "bf16", steps=1, with_precision_map=False)
    data = report.to_dict()["dtype_contract"]
    assert data["kind"] == "mixed" and data["master"] == "fp32 weights"
    assert data["autocast"] == "bf16" and data["optimizer"] == "none"
    assert "dtype contract: mixed: weights fp32" in report.to_text()
    fp32 = diagnose(model, closure, "fp32", steps=1, with_precision_map=False)
    assert fp32.to_dict()["dtype_contract"]["kind"] == "fp32"

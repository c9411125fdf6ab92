"""The Trainer reads the dtype contract at set-up and reports it in FitResult."""

from __future__ import annotations

import torch
from torch import nn

from ampkit.trainer.trainer import Trainer


def data(n: int = 16) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(
        torch.randn(n, 8, generator=g), torch.randn(n, 2, generator=g)
    )


def fit(precision: str) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        max_steps=2,
        loss_fn=nn.functional.mse_loss,
        precision=precision,
        device="cpu",
        batch_size=8,
    )
    contract = trainer.fit(data()).dtype_contract
    assert contract is not None
    return contract


def test_bf16_run_reports_fp32_weights_as_the_master():
    contract = fit("bf16")
    assert contract["kind"] == "mixed" and contract["master"] == "fp32 weights"
    assert contract["autocast"] == "bf16" and contract["optimizer"] == "AdamW"


def test_bf16_true_run_reports_compensated_bf16_weights_and_fp32_state():
    contract = fit("bf16-true")
    assert contract["kind"] == "pure-bf16-compensated" and contract["master"] == "kahan"
    assert contract["groups"][0]["state"] == ["fp32"]


def test_fp32_run_is_fp32():
    assert fit("fp32")["kind"] == "fp32"

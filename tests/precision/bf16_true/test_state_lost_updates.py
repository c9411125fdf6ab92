"""Lost updates of the optimizer state, apart from the weights: the doctor's probe and the
Trainer metric."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import ampkit
from ampkit.doctor import probe_lost_updates
from ampkit.errors import ConfigurationError, PrecisionWarning


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4)
    )


def test_probe_reports_state_per_state_precision_from_a_settled_state():
    model = _mlp()
    x = torch.randn(16, 32)
    g = torch.Generator().manual_seed(0)
    report = probe_lost_updates(
        model, lambda: model(x[torch.randint(0, 16, (8,), generator=g)]).pow(2).mean(), lr=1e-4
    )
    state = report.state_overall
    assert list(state) == ["fp32", "bf16-stochastic", "bf16-kahan", "bf16"]
    assert state["fp32"] == 0.0  # nothing is rounded
    assert state["bf16-kahan"] < 0.01
    # a settled second moment moves by 0.1% of itself per step: under half a bf16 ulp
    assert state["bf16"] > 0.3 and state["bf16-stochastic"] > 0.3
    assert report.state_per_tensor["bf16"]["0.weight.exp_avg_sq"] > 0.5
    assert set(report.state_per_tensor["fp32"]) >= {"0.weight.exp_avg", "0.weight.exp_avg_sq"}
    text = report.to_text()
    assert "warning: with state_precision='bf16'" in text
    assert json.loads(json.dumps(report.to_dict()))["state_overall"]["fp32"] == 0.0
    assert model[0].weight.dtype == torch.float32  # restored


def test_probe_of_weights_only_and_bad_state_precisions():
    model = _mlp()
    x = torch.randn(4, 32)
    report = probe_lost_updates(model, lambda: model(x).sum(), steps=1, state_precisions=())
    assert report.state_overall == {} and "optimizer-state" not in report.to_text()
    with pytest.raises(ConfigurationError, match="state_precisions: 'fp16'"):
        probe_lost_updates(model, lambda: model(x).sum(), state_precisions=("fp16",))


class _Rows(ampkit.Callback):
    def __init__(self) -> None:
        self.rows: list = []

    def on_log(self, trainer, metrics) -> None:
        self.rows.append(metrics)


def _fit(mode: ampkit.Bf16True) -> list:
    rows = _Rows()
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 32, generator=g), torch.randn(64, 4, generator=g)
    )
    ampkit.Trainer(
        _mlp(),
        lambda p: torch.optim.AdamW(p, lr=1e-4),
        loss_fn=nn.functional.mse_loss,
        max_steps=40,
        precision=mode,
        batch_size=16,
        logging=ampkit.LoggingConfig(log_every=20),
        callbacks=[rows],
    ).fit(data)
    return rows.rows


def test_trainer_logs_state_lost_updates_and_warns_once_for_bf16_state():
    rows = _fit(ampkit.Bf16True())
    assert [r.lost_state_updates for r in rows] == [0.0, 0.0]  # fp32 state
    assert '"lost_state_updates":0.0' in rows[-1].to_json()
    with pytest.warns(PrecisionWarning, match="state_precision='bf16'") as caught:
        rows = _fit(ampkit.Bf16True(state_precision="bf16"))
    # the second moment settles within the 40 steps: its decreases are rounded away
    assert rows[-1].lost_state_updates > 0.1
    assert sum("optimizer-state updates were rounded away" in str(w.message) for w in caught) == 1

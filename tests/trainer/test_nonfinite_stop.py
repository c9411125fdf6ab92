"""fp32/bf16 training that diverges to inf/NaN stops, names the step, and writes no NaN weights."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from ampkit import CheckpointConfig, LoggingConfig, NonFiniteTrainingError, Trainer


def batches(bad: int, count: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    data = [
        (torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g))
        for _ in range(count)
    ]
    data[bad][0][0, 0] = float("nan")  # the batch of step bad + 1 makes the loss NaN
    return data


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_nan_loss_stops_before_any_nan_checkpoint_or_final_weights(tmp_path, precision):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.functional.cross_entropy,
        max_steps=8,
        precision=precision,
        device="cpu",
        logging=LoggingConfig(log_every=2, metrics_file=tmp_path / "metrics.jsonl"),
        checkpoint=CheckpointConfig(tmp_path / "ckpt", every=3),
        final_weights=tmp_path / "model.safetensors",
    )
    with pytest.raises(NonFiniteTrainingError) as caught:
        trainer.fit(batches(bad=4))  # step 5
    message = str(caught.value)
    assert f"the {precision} training loss became non-finite (nan) by step 6" in message
    assert "steps 5-6" in message and "step-00000003" in message
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-00000003"]
    assert not (tmp_path / "model.safetensors").exists()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"] is None) for r in rows] == [(2, False), (4, False), (6, True)]


def test_a_checkpoint_step_between_logged_steps_is_checked_too(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.functional.cross_entropy,
        max_steps=8,
        precision="fp32",
        device="cpu",
        logging=LoggingConfig(log_every=4),
        checkpoint=CheckpointConfig(tmp_path / "ckpt", every=2),
    )
    with pytest.raises(NonFiniteTrainingError, match="by step 6 .mean over steps 5-6"):
        trainer.fit(batches(bad=5))  # step 6: a checkpoint step, not a logged one
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "step-00000002",
        "step-00000004",
    ]

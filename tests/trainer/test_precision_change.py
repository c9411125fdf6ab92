"""Resuming into another precision on purpose (fp16 -> bf16 after a divergence)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import ampkit
from ampkit import CheckpointError, Trainer


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [
        (torch.randn(4, 6, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(4)
    ]


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))


class WeightsAtStart(ampkit.Callback):
    def on_fit_start(self, trainer) -> None:
        self.weights = {k: v.clone() for k, v in trainer.raw_model.state_dict().items()}


def trainer(
    net, folder, precision, max_steps, resume=None, allow_change=False, **kwargs
) -> Trainer:
    return Trainer(
        net,
        torch.optim.AdamW(net.parameters(), lr=1e-2),
        loss_fn=nn.functional.cross_entropy,
        max_steps=max_steps,
        precision=precision,
        device="cpu",
        checkpoint=ampkit.CheckpointConfig(
            folder / "ckpt", every=2, resume=resume, allow_precision_change=allow_change
        ),
        logging=ampkit.LoggingConfig(log_every=1, metrics_file=folder / "metrics.jsonl"),
        **kwargs,
    )


@pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")
def test_fp16_run_resumes_in_bf16_with_weights_and_optimizer_and_no_scaler(tmp_path):
    first = model()
    trainer(first, tmp_path, "fp16", 2).fit(data())
    saved = {k: v.clone() for k, v in first.state_dict().items()}
    listing = sorted(p.name for p in (tmp_path / "ckpt").iterdir())

    with pytest.raises(CheckpointError, match="--allow-precision-change"):
        trainer(model(), tmp_path, "bf16", 4, resume="auto").fit(data())
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == listing  # nothing written

    probe = WeightsAtStart()
    second = trainer(
        model(),
        tmp_path,
        "bf16",
        4,
        resume="auto",
        allow_change=True,
        callbacks=[probe],
    )
    result = second.fit(data())
    assert all(torch.equal(probe.weights[k], v) for k, v in saved.items())
    assert second.optimizer.state[next(iter(second.raw_model.parameters()))]["step"] == 4
    assert result.final_scale == 1.0 and result.precision == "bf16"
    assert any("precision changed on resume: fp16 -> bf16" in n for n in result.notes)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r.get("precision_change") for r in rows] == [None, None, "fp16 -> bf16", None]
    assert rows[0]["scale"] == 65536.0 and rows[2]["scale"] == 1.0

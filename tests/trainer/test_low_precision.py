"""The Trainer under bf16-true (lost-updates metric) and fp8's compile default."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ampkit
from ampkit import ConfigurationError, PrecisionWarning, Trainer, resolve_precision
from ampkit.precision.hardware import HardwareInfo


def _data(n: int = 128):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.randn(16, 4, generator=g))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
    )


class Rows(ampkit.Callback):
    def __init__(self) -> None:
        self.rows = []

    def on_log(self, trainer, metrics):
        self.rows.append(metrics)


def test_bf16_true_trains_in_bf16_and_logs_lost_updates():
    rows = Rows()
    model = _model()
    Trainer(
        model,
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        loss_fn=nn.functional.mse_loss,
        max_steps=20,
        precision="bf16-true",
        batch_size=16,
        logging=ampkit.LoggingConfig(log_every=5),
        callbacks=[rows],
    ).fit(_data())
    assert [model[i].weight.dtype for i in (0, 2, 4)] == [
        torch.bfloat16,
        torch.bfloat16,
        torch.float32,
    ]
    assert rows.rows[-1].loss < 0.7 * rows.rows[0].loss
    assert all(r.lost_updates is not None and r.lost_updates < 0.01 for r in rows.rows)


def test_uncompensated_bf16_true_warns_twice_when_updates_vanish():
    model = nn.Linear(16, 4, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    with pytest.warns(PrecisionWarning, match="update_compensation='none'"):
        trainer = Trainer(
            model,
            lambda p: torch.optim.SGD(p, lr=1e-7),
            loss_fn=nn.functional.mse_loss,
            max_steps=2,
            precision=ampkit.Bf16True(update_compensation="none", keep_fp32=()),
            batch_size=16,
        )
    with pytest.warns(PrecisionWarning, match=r"100\.0% of the intended weight updates"):
        trainer.fit(_data())


@pytest.mark.filterwarnings("ignore:MixedPrecision.update_compensation=:DeprecationWarning")
def test_bf16_true_options_need_bf16_true():
    with pytest.raises(ConfigurationError, match="update_compensation: given, but the precision"):
        ampkit.MixedPrecision("bf16", "cpu", update_compensation="kahan")
    with pytest.raises(ConfigurationError, match="given next to the mode object"):
        ampkit.MixedPrecision(ampkit.Bf16True(), "cpu", update_compensation="kahan")


def test_fit_result_names_the_state_precision_and_its_lost_updates():
    rows = Rows()
    result = Trainer(
        _model(),
        lambda p: torch.optim.AdamW(p, lr=1e-3),
        loss_fn=nn.functional.mse_loss,
        max_steps=4,
        precision=ampkit.Bf16True(state_precision="bf16-stochastic"),
        batch_size=16,
        logging=ampkit.LoggingConfig(log_every=2),
        callbacks=[rows],
    ).fit(_data())
    assert result.state_precision == "bf16-stochastic"
    assert result.lost_state_updates is not None
    assert result.lost_state_updates == rows.rows[-1].lost_state_updates
    fp32 = Trainer(
        _model(),
        lambda p: torch.optim.AdamW(p, lr=1e-3),
        loss_fn=nn.functional.mse_loss,
        max_steps=2,
        precision="bf16-true",
        batch_size=16,
        logging=ampkit.LoggingConfig(log_every=1),
    ).fit(_data())
    assert (fp32.state_precision, fp32.lost_state_updates) == ("fp32", 0.0)
    bf16 = Trainer(
        _model(),
        lambda p: torch.optim.SGD(p, lr=0.1),
        loss_fn=nn.functional.mse_loss,
        max_steps=1,
        precision="bf16",
        batch_size=16,
    ).fit(_data())
    assert (bf16.state_precision, bf16.lost_state_updates) == (None, None)


def test_fp8_on_cuda_compiles_by_default_and_warns_when_compile_is_off():
    h100 = HardwareInfo(
        device=torch.device("cuda", 0),
        name="H100",
        cuda_capability=(9, 0),
        cuda_bf16=True,
        torchao_available=True,
    )
    policy = resolve_precision("fp8", hardware=h100)
    params = list(_model().parameters())
    assert Trainer(_model(), torch.optim.SGD(params, lr=0.1), max_steps=1, precision=policy).compile
    with pytest.warns(PrecisionWarning, match="eager fp8 runs separate cast"):
        trainer = Trainer(
            _model(), torch.optim.SGD(params, lr=0.1), max_steps=1, precision=policy, compile=False
        )
    assert trainer.compile is False


@pytest.mark.parametrize("compensation", ["kahan", "stochastic"])
def test_bf16_true_resume_equals_the_uninterrupted_run(tmp_path, compensation):
    def run(steps: int, folder, resume=None):
        model = _model()
        Trainer(
            model,
            lambda p: torch.optim.AdamW(p, lr=1e-3),
            loss_fn=nn.functional.mse_loss,
            max_steps=steps,
            precision=ampkit.Bf16True(update_compensation=compensation),
            batch_size=16,
            checkpoint=ampkit.CheckpointConfig(folder, every=2, resume=resume),
        ).fit(_data())
        return model

    whole = run(6, tmp_path / "whole")
    run(2, tmp_path / "split")
    resumed = run(6, tmp_path / "split", resume="auto")
    for a, b in zip(whole.parameters(), resumed.parameters(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_bf16_true_keeps_fp32_islands_in_fp32():
    model = _model()
    Trainer(
        model,
        lambda p: torch.optim.AdamW(p, lr=1e-3),
        loss_fn=nn.functional.mse_loss,
        max_steps=2,
        precision="bf16-true",
        batch_size=16,
        keep_fp32=["2"],
    ).fit(_data())
    assert [model[i].weight.dtype for i in (0, 2, 4)] == [
        torch.bfloat16,
        torch.float32,
        torch.float32,
    ]

"""MixedPrecision.prepare_model / prepare_optimizer in a hand-written loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ampkit
from ampkit import CompensatedOptimizer, ConfigurationError, MixedPrecision, PrecisionWarning


def test_prepare_is_a_no_op_outside_fp8_and_bf16_true():
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("bf16", "cpu")
    assert mp.prepare_model(model) is model and mp.prepare_optimizer(opt) is opt
    assert model.weight.dtype == torch.float32


def test_hand_written_bf16_true_loop_decreases_the_loss():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1)
    )
    x = torch.randn(64, 16)
    y = x.sum(dim=1, keepdim=True) / 4
    with MixedPrecision(ampkit.Bf16True(update_compensation="stochastic"), "cpu") as mp:
        model = mp.prepare_model(model)
        opt = mp.prepare_optimizer(torch.optim.AdamW(model.parameters(), lr=3e-3))
        assert isinstance(opt, CompensatedOptimizer) and opt.compensation == "stochastic"
        assert model[0].weight.dtype == torch.bfloat16 and model[4].weight.dtype == torch.float32
        losses = []
        for _ in range(40):
            with mp.autocast():
                loss = nn.functional.mse_loss(model(x).float(), y)
            mp.backward(loss)
            mp.step(opt)
            losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


def test_option_checks():
    with pytest.warns(PrecisionWarning, match="every update smaller than half an ulp"):
        MixedPrecision(ampkit.Bf16True(update_compensation="none"), "cpu")
    with pytest.raises(ConfigurationError, match="not a compensation"):
        MixedPrecision(ampkit.Bf16True(update_compensation="kahn"), "cpu")


def _train_bf16_true(mp: MixedPrecision) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 1))
    x = torch.randn(32, 8)
    y = x.sum(dim=1, keepdim=True)
    with mp:
        model = mp.prepare_model(model)
        opt = mp.prepare_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-3))
        for _ in range(5):
            with mp.autocast():
                loss = nn.functional.mse_loss(model(x).float(), y)
            mp.backward(loss)
            mp.step(opt)
    return model, opt


@pytest.mark.parametrize("state", ["bf16-stochastic", "bf16-kahan"])
def test_state_precision_keyword_trains_like_the_mode_object(state):
    with pytest.warns(DeprecationWarning, match=r"ampkit\.Bf16True\(state_precision=\.\.\.\)"):
        by_keyword, opt = _train_bf16_true(
            MixedPrecision("bf16-true", "cpu", bf16_true_state_precision=state)
        )
    by_mode, _ = _train_bf16_true(MixedPrecision(ampkit.Bf16True(state_precision=state), "cpu"))
    assert opt.state_precision == state
    assert opt.state[by_keyword[0].weight]["exp_avg_sq"].dtype == torch.bfloat16
    for a, b in zip(by_keyword.parameters(), by_mode.parameters(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_state_precision_keyword_checks():
    with pytest.warns(PrecisionWarning, match="state_precision='bf16' under bf16-true"):
        MixedPrecision(ampkit.Bf16True(state_precision="bf16"), "cpu")
    with pytest.raises(ConfigurationError, match="state_precision"):
        ampkit.Bf16True(state_precision="bf8")
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(
            ConfigurationError,
            match="state_precision: given, but the precision is bf16; it applies to bf16-true only",
        ),
    ):
        MixedPrecision("bf16", "cpu", bf16_true_state_precision="bf16-stochastic")
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ConfigurationError, match="given next to the mode object"),
    ):
        MixedPrecision(ampkit.Bf16True(), "cpu", bf16_true_state_precision="fp32")

"""The dtype contract (ampkit.precision.contract): what a model and optimizer really train in,
and the one warning about a pure-bf16 set-up nobody asked for."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.precision.bf16_true import CompensatedOptimizer
from ampkit.precision.contract import check_dtype_contract, dtype_contract
from ampkit.precision.engine import MixedPrecision
from ampkit.precision.scaler import LossScaler


def mlp(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).to(dtype)


def contract_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, PrecisionWarning)]


def test_plain_adamw_over_a_bf16_model_is_pure_bf16_with_bf16_state():
    model = mlp(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters())
    before = dtype_contract(opt, model=model, autocast=torch.bfloat16)
    assert (before.kind, before.master, before.weights) == ("pure-bf16", "none", "bf16")
    assert before.groups[0].state == ("bf16",) and not before.groups[0].state_read
    assert before.low_precision_params == 4 and before.first_low == "0.weight"
    model(torch.randn(4, 8, dtype=torch.bfloat16)).sum().backward()
    opt.step()
    after = dtype_contract(opt, model=model, autocast=torch.bfloat16)
    assert after.groups[0].state == ("bf16",) and after.groups[0].state_read


def test_fp32_weights_under_autocast_are_mixed_and_fp32_without_it():
    opt = torch.optim.AdamW(mlp().parameters())
    assert dtype_contract(opt, autocast=torch.bfloat16).kind == "mixed"
    assert dtype_contract(opt, autocast=None).kind == "fp32"
    assert dtype_contract(opt, autocast=torch.bfloat16).master == "fp32 weights"


def test_state_dtypes_are_read_per_group_fp32_weights_with_bf16_moments():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    for state in opt.state.values():
        state["momentum_buffer"] = state["momentum_buffer"].bfloat16()
    contract = dtype_contract(opt, autocast=torch.bfloat16)
    assert contract.kind == "mixed" and contract.groups[0].state == ("bf16",)
    assert contract.groups[0].state_read


def test_a_compensated_optimizer_is_pure_bf16_compensated_and_says_nothing():
    model = mlp(torch.bfloat16)
    opt = CompensatedOptimizer(torch.optim.AdamW(model.parameters()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        contract = check_dtype_contract(opt, model=model, autocast=torch.bfloat16, strict=True)
    assert (contract.kind, contract.master, contract.optimizer) == (
        "pure-bf16-compensated",
        "kahan",
        "AdamW",
    )
    assert contract.groups[0].state == ("fp32",)  # state_precision="fp32", predicted


def test_bf16_and_fp32_weights_in_one_plain_group_are_a_mixed_group():
    model = mlp()
    model[2].bfloat16()
    contract = dtype_contract(torch.optim.AdamW(model.parameters()), model=model)
    assert contract.kind == "mixed-group" and contract.weights == "bf16+fp32"
    assert contract.first_low == "2.weight" and contract.silent_pure_bf16


def test_fp16_weights_are_refused():
    opt = torch.optim.AdamW(mlp(torch.float16).parameters())
    with pytest.raises(ConfigurationError, match="fp16 weights lose every update"):
        check_dtype_contract(opt, autocast=torch.float16)


def test_strict_makes_the_silent_pure_bf16_an_error():
    opt = torch.optim.AdamW(mlp(torch.bfloat16).parameters())
    with pytest.raises(ConfigurationError, match="no fp32 master.*strict=True"):
        check_dtype_contract(opt, strict=True)


def test_intended_pure_bf16_says_nothing():
    opt = torch.optim.AdamW(mlp(torch.bfloat16).parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_dtype_contract(opt, intended_pure_bf16=True).kind == "pure-bf16"


def test_hand_loop_with_loss_scaler_warns_once_with_the_fix():
    model = mlp(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = LossScaler(enabled=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8, dtype=torch.bfloat16)).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    (message,) = contract_warnings(caught)
    assert message.startswith("LossScaler: this run trains in pure bf16 with no fp32 master")
    assert "model.float()" in message and "ampkit.Bf16True(...)" in message
    assert caught[0].filename == __file__  # points at the user's line


def test_engine_bf16_true_without_prepare_optimizer_warns_and_with_it_is_silent():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp = MixedPrecision("bf16-true", "cpu")
        model = mp.prepare_model(mlp())
        forgot = torch.optim.AdamW(model.parameters())
        mp.check_contract(forgot, model)
    (message,) = contract_warnings(caught)
    assert message.startswith("MixedPrecision('bf16-true'): this run trains in pure bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mp = MixedPrecision("bf16-true", "cpu")
        model = mp.prepare_model(mlp())
        opt = mp.prepare_optimizer(torch.optim.AdamW(model.parameters()))
        with mp.autocast():
            loss = model(torch.randn(4, 8, dtype=torch.bfloat16)).float().sum()
        mp.backward(loss)
        mp.step(opt)
    assert mp.contract is not None and mp.contract.kind == "pure-bf16-compensated"
    assert mp.contract.weights == "bf16+fp32"  # the kept fp32 final projection


def test_engine_refuses_bf16_weights_under_bf16_mixed_before_the_contract():
    mp = MixedPrecision("bf16", "cpu")
    with pytest.raises(ConfigurationError, match="ask for that precision by name"):
        mp.check_contract(torch.optim.AdamW(mlp(torch.bfloat16).parameters()))


def test_contract_without_an_optimizer_describes_a_plain_one():
    contract = dtype_contract(None, model=mlp(), autocast=torch.bfloat16)
    assert contract.optimizer == "none" and contract.kind == "mixed"
    assert "param group 0: 4 params, weights fp32, state fp32 (predicted)" in contract.to_text()
    assert contract.to_dict()["groups"][0]["state"] == ["fp32"]

"""fp8 plans that are what they say: each recipe's error per layer (emulated on the CPU), a
recommended recipe, a filter that matches nothing refused in one line, and the recipe per
layer recorded in checkpoints so a resume cannot change it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import CheckpointError, ConfigurationError, fp8_plan
from ampkit.precision.fp8.recipes import DEFAULT_RECIPE, recipe_errors, recommend_recipe
from ampkit.precision.modes import Fp8


def test_rowwise_is_more_accurate_when_one_row_holds_an_outlier():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 64, generator=g)
    w = torch.randn(32, 64, generator=g)
    plain = recipe_errors(x, w, None)
    x[0] *= 1e5  # one token's activations are huge: a per-tensor scale starves the others
    errors = recipe_errors(x, w, None)
    assert errors["rowwise"] < errors["tensorwise"] / 5
    assert errors["rowwise"] == pytest.approx(plain["rowwise"], rel=1e-3)  # per-row scales
    assert errors["rowwise"] == errors["rowwise_with_gw_hp"]  # the same forward
    assert recommend_recipe(errors) == "rowwise"


def test_weight_gradient_in_high_precision_is_more_accurate():
    g = torch.Generator().manual_seed(1)
    x, w, grad = torch.randn(512, 64, generator=g), torch.randn(32, 64, generator=g), None
    grad = torch.randn(512, 32, generator=g)
    grad[:, 0] *= 1e3  # one output channel's gradient dominates
    errors = recipe_errors(x, w, grad)
    assert errors["rowwise_with_gw_hp"] <= errors["rowwise"]
    assert all(0 < e < 1 for e in errors.values())


def test_the_default_is_kept_when_nothing_is_measurably_better():
    assert (
        recommend_recipe({"tensorwise": 0.030, "rowwise": 0.029, "rowwise_with_gw_hp": 0.029})
        == DEFAULT_RECIPE
    )
    assert (
        recommend_recipe(
            {"tensorwise": 0.03, "rowwise": 0.029, "rowwise_with_gw_hp": 0.029},
            {"tensorwise": 1.0, "rowwise": 1.2, "rowwise_with_gw_hp": 1.1},
        )
        == "rowwise"
    )  # CUDA: the fastest of the accurate ones


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))


def test_plan_shows_each_layers_recipe_errors_and_recommendation():
    net = model()
    x = torch.randn(128, 64)
    plan = fp8_plan(net, closure=lambda: net(x).pow(2).mean(), use_size_prior=False)
    for layer in plan.layers:
        assert set(layer.recipe_errors) == {"tensorwise", "rowwise", "rowwise_with_gw_hp"}
        assert layer.recommended_recipe in layer.recipe_errors
    text = plan.to_text()
    assert "error t / r / gw" in text and "tensorwise is the default" in text
    assert plan.to_dict()["layers"][0]["recommended_recipe"] is not None


def test_a_filter_that_matches_no_module_is_one_line():
    with pytest.raises(
        ConfigurationError,
        match=r"2 module\(s\) that match no module of Sequential: 'lm_head', '3'\.",
    ) as info:
        fp8_plan(model(), exclude=["lm_head", "3", "2"])
    assert "\n" not in str(info.value)


def test_excluded_layers_stay_out_of_fp8():
    plan = fp8_plan(model(), exclude=["2"], use_size_prior=False)
    assert plan.selected == ("0",)
    assert plan.layers[1].reason == "excluded (exclude=)"


def test_resume_under_another_recipe_is_refused():
    net = model()
    saved = Fp8(plan=fp8_plan(net, use_size_prior=False)).state_dict()
    assert saved == {"layer_recipes": {"0": "tensorwise", "2": "tensorwise"}}
    same = Fp8(plan=fp8_plan(net, use_size_prior=False))
    same.load_state_dict(saved)  # the same plan: accepted
    other = Fp8(recipe="rowwise", plan=fp8_plan(net, recipe="rowwise", use_size_prior=False))
    with pytest.raises(CheckpointError, match="0: tensorwise -> rowwise"):
        other.load_state_dict(saved)
    fewer = Fp8(plan=fp8_plan(net, exclude=["2"], use_size_prior=False))
    with pytest.raises(CheckpointError, match="2: tensorwise -> bf16"):
        fewer.load_state_dict(saved)
    fewer.load_state_dict({})  # a checkpoint written before the recipes were recorded

"""fp8_plan decisions on synthetic layer shapes and numerics (no torchao needed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import ConfigurationError, fp8_plan
from ampkit.precision.fp8 import predicted_speedup, size_prior


class Shapes(nn.Module):
    """Linears of chosen shapes on the meta device (no memory): shape rules only."""

    def __init__(self, shapes: dict[str, tuple[int, int]]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict(
            {k: nn.Linear(i, o, device="meta") for k, (i, o) in shapes.items()}
        )


def _decisions(plan):
    return {d.name.removeprefix("layers."): (d.fp8, d.reason) for d in plan.layers}


def test_tensorwise_plan_follows_divisibility_and_torchao_size_prior():
    model = Shapes(
        {
            "odd": (4100, 8192),  # K not divisible by 16
            "small": (4096, 1024),  # K <= 4096 and N <= 1024: skipped by the prior
            "wide_out": (4096, 2048),  # N > 1024
            "deep_in": (8192, 512),  # K > 4096
        }
    )
    got = _decisions(fp8_plan(model))
    assert got["odd"] == (False, "K=4100 or N=8192 not divisible by 16")
    assert got["small"][0] is False and "size prior" in got["small"][1]
    assert got["wide_out"][0] is True and got["deep_in"][0] is True


def test_rowwise_prior_is_stricter():
    assert size_prior("rowwise", 4096, 2048)[0] is False  # N <= 2048
    assert size_prior("rowwise", 1024, 8192)[0] is False  # K <= 1024
    assert size_prior("rowwise", 2048, 4096)[0] is False  # N <= 4096 and K <= 2048
    assert size_prior("rowwise", 4096, 8192)[0] is True
    model = Shapes({"a": (4096, 2048), "b": (4096, 8192)})
    plan = fp8_plan(model, recipe="rowwise")
    assert plan.selected == ("layers.b",) and plan.recipe == "rowwise" and not plan.measured


def test_predicted_speedup_interpolates_the_published_anchors():
    assert predicted_speedup(1024, 2048, 1024) == pytest.approx(0.80)
    assert predicted_speedup(4096, 8192, 16384) == pytest.approx(1.39)
    assert predicted_speedup(1, 16, 16) == 0.5  # clamped


class WideRange(nn.Module):
    """``bad`` sees inputs spanning 1e-8..1e3 (most flush to zero in e4m3 after per-tensor
    scaling); ``good`` sees well-scaled ones."""

    def __init__(self) -> None:
        super().__init__()
        self.good = nn.Linear(32, 32)
        self.bad = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spread = torch.ones(32)
        spread[:16] = 1e-8
        spread[16] = 1e3
        return self.bad(self.good(x) * 0 + x * spread).pow(2).mean()


def test_numerics_reject_a_layer_whose_inputs_underflow_e4m3_and_record_m():
    torch.manual_seed(0)
    plan = fp8_plan(WideRange(), torch.randn(4, 8, 32), use_size_prior=False)
    good, bad = plan.layers
    assert (good.name, good.fp8, good.tokens) == ("good", True, 32)
    assert good.input_lost < 0.01 and good.grad_lost is not None
    assert bad.fp8 is False and "lost in fp8" in bad.reason
    assert bad.input_lost == pytest.approx(0.5, abs=0.05)  # the 1e-8 half flushes to zero
    text = plan.to_text()
    assert "e4m3 in lost" in text and "32 x 32 x 16" in text and "1 of 2 Linear layers" in text
    assert plan.to_dict()["layers"][1]["fp8"] is False


def test_plan_leaves_gradients_untouched():
    model = WideRange()
    sentinel = torch.full_like(model.good.weight, 7.0)
    model.good.weight.grad = sentinel
    fp8_plan(model, torch.randn(2, 32))
    assert model.good.weight.grad is sentinel and model.bad.weight.grad is None


def test_refusals():
    model = WideRange()
    with pytest.raises(ConfigurationError, match="recipe='delayed' is unknown"):
        fp8_plan(model, recipe="delayed")
    with pytest.raises(ConfigurationError, match="measure=True needs the model on a CUDA"):
        fp8_plan(model, measure=True)
    with pytest.raises(ConfigurationError, match="not both"):
        fp8_plan(model, torch.randn(2, 32), closure=lambda: torch.zeros(()))
    with pytest.raises(ConfigurationError, match="scalar loss that requires grad"):
        fp8_plan(nn.Linear(32, 32), closure=lambda: torch.ones(()))


# -- nn.Linear subclasses -------------------------------------------------------------------


class MatmulLinear(nn.Linear):
    """Falcon's FalconLinear: its own forward, the same function as nn.Linear's."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = input @ self.weight.T
        return out if self.bias is None else out + self.bias


class TaggedLinear(nn.Linear):
    """A subclass that keeps nn.Linear's forward."""


class ScaledLinear(nn.Linear):
    """A subclass whose forward is not a plain linear map (a LoRA-style scale)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(input)


class Subclasses(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.plain = nn.Linear(32, 32)
        self.falcon = MatmulLinear(32, 32)
        self.tagged = TaggedLinear(32, 32, bias=False)
        self.scaled = ScaledLinear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scaled(self.tagged(self.falcon(self.plain(x)))).pow(2).mean()


def test_linear_subclasses_are_planned_and_only_a_different_forward_is_kept():
    from ampkit.precision.fp8 import linear_kept_reason

    model = Subclasses()
    assert linear_kept_reason(model.plain) is None
    assert linear_kept_reason(model.falcon) is None  # probed: computes F.linear
    assert linear_kept_reason(model.tagged) is None  # Linear's own forward
    assert "ScaledLinear overrides forward" in linear_kept_reason(model.scaled)
    plan = fp8_plan(model, torch.randn(4, 32), use_size_prior=False)
    got = {d.name: (d.fp8, d.reason) for d in plan.layers}
    assert list(got) == ["plain", "falcon", "tagged", "scaled"]  # every Linear is in the plan
    assert plan.selected == ("plain", "falcon", "tagged")
    assert got["scaled"][0] is False
    assert got["scaled"][1].startswith("kept: ScaledLinear overrides forward: its forward")
    assert all(d.tokens == 4 for d in plan.layers)  # subclasses are observed too
    assert "3 of 4 Linear layers in fp8" in plan.to_text()


def test_the_probe_of_a_subclass_leaves_the_rng_and_hooks_alone():
    from ampkit.precision.fp8 import linear_kept_reason

    layer = MatmulLinear(16, 16)
    calls: list[int] = []
    layer.register_forward_hook(lambda *args: calls.append(1))
    state = torch.get_rng_state()
    assert linear_kept_reason(layer) is None
    assert torch.equal(torch.get_rng_state(), state) and calls == []
    extra = MatmulLinear(16, 16)
    extra.register_parameter("lora", nn.Parameter(torch.zeros(16)))
    assert "holds more than weight and bias" in linear_kept_reason(extra)
    assert "not an nn.Linear" in linear_kept_reason(nn.Conv1d(1, 1, 1))

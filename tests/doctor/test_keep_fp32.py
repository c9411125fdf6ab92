"""keep_fp32: chosen modules really compute in fp32 inside autocast, and the hooks come off."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import ConfigurationError, keep_fp32


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4))


def _dtypes(model: nn.Module, x: torch.Tensor) -> dict[str, torch.dtype]:
    seen: dict[str, torch.dtype] = {}
    handles = [
        m.register_forward_hook(lambda mod, args, out, n=n: seen.__setitem__(n, out.dtype))
        for n, m in model.named_children()
    ]
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def test_named_module_computes_in_fp32_and_matches_the_fp32_reference():
    model, x = _model(), torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = model[1](model[0](x))
    assert hidden.dtype == torch.bfloat16  # CPU autocast keeps LayerNorm in its input dtype
    with keep_fp32(model, ["2"]):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, model[2](hidden.float()), rtol=0, atol=0)


def test_without_islands_the_same_module_runs_in_bf16():
    model, x = _model(), torch.randn(4, 8)
    assert _dtypes(model, x)["2"] == torch.bfloat16
    islands = keep_fp32(model, ["0", "2"])
    assert _dtypes(model, x) == {"0": torch.float32, "1": torch.float32, "2": torch.float32}
    islands.remove()
    islands.remove()  # idempotent
    assert _dtypes(model, x)["0"] == torch.bfloat16


def test_module_types_are_matched():
    model = _model()
    islands = keep_fp32(model, [nn.Linear])
    assert islands.modules == ("0", "2")
    assert set(_dtypes(model, torch.randn(2, 8)).values()) == {torch.float32}
    islands.remove()


def test_fp16_overflow_in_a_layer_is_fixed_by_keeping_it_in_fp32():
    big = nn.Linear(4, 4)
    nn.init.constant_(big.weight, 3e4)  # outputs ~1.2e5 > fp16's largest finite value
    model = nn.Sequential(big, nn.Linear(4, 1))
    x = torch.ones(2, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        assert not torch.isfinite(model(x)).all()
    with keep_fp32(model, ["0", "1"]), torch.autocast("cpu", dtype=torch.float16):
        assert torch.isfinite(model(x)).all()


def test_outside_autocast_nothing_changes():
    model, x = _model(), torch.randn(4, 8)
    expected = model(x)
    with keep_fp32(model, [nn.Linear, "1"]):
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")


def test_autocast_is_restored_when_the_module_raises():
    model = nn.Sequential(nn.Linear(2, 2), _Boom())
    with keep_fp32(model, ["1"]), torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="boom"):
            model(torch.ones(1, 2))
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


def test_unknown_name_suggests_the_closest():
    with pytest.raises(ConfigurationError, match=r"'hed' is not a module.*Did you mean 'head'"):
        keep_fp32(nn.ModuleDict({"head": nn.Linear(1, 1)}), ["hed"])


@pytest.mark.parametrize("target", [nn.Conv2d, 3])
def test_type_without_match_or_wrong_target_raises(target):
    with pytest.raises(ConfigurationError, match="keep_fp32"):
        keep_fp32(_model(), [target])


def test_islands_inside_a_mixed_precision_training_step():
    import ampkit

    model, x = _model(), torch.randn(4, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model[2].weight.detach().clone()
    with ampkit.MixedPrecision("bf16", "cpu") as mp, keep_fp32(model, ["2"]):
        with mp.autocast():
            out = model(x)
            loss = out.float().square().mean()
        assert out.dtype == torch.float32
        mp.backward(loss)
        assert model[2].weight.grad.dtype == torch.float32
        assert mp.step(optimizer).stepped
    assert not torch.equal(model[2].weight, before)

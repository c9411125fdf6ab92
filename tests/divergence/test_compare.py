"""``ampkit.compare``: a planted fp16 overflow is found at its layer, a correct bf16 run parts
nowhere, fp32 against itself is bitwise equal, and a record written to a folder and read back
gives the same comparison as the run in one process."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import ampkit
from ampkit.divergence import compare_records, load_record, parse_setting, record
from ampkit.errors import ConfigurationError, PrecisionWarning


def _mlp(scale: float = 1.0) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)
    )
    with torch.no_grad():
        model[2].weight.mul_(scale)  # scale 1e5: its outputs pass fp16's max (65504)
    return model, (torch.randn(8, 16), torch.randint(0, 4, (8,)))


def _compare(model, batch, a, b, **kwargs):
    run = lambda: ampkit.compare(  # noqa: E731
        model, a, b, batch=batch, loss_fn=nn.functional.cross_entropy, **kwargs
    )
    if "fp16" in (a, b):
        with pytest.warns(PrecisionWarning, match="fp16"):  # emulated on a CPU
            return run()
    return run()


def test_a_planted_fp16_overflow_is_found_at_the_scaled_layer():
    model, batch = _mlp(scale=1e5)
    result = _compare(model, batch, "fp32", "fp16")
    first = result.first
    assert first is not None and first.module == "2" and first.kind == "forward"
    assert first.b_nonfinite > 0 and first.a_nonfinite == 0  # inf in fp16 only
    assert first.a_absmax > 65504  # finite in fp32, past fp16's largest value
    assert result.diff.contributors[0].module == "2"
    upstream = [e for e in result.diff.entries if e.module in ("0", "1") and e.kind == "forward"]
    assert upstream and not any(e.diverged for e in upstream)  # the layers before it agree
    assert "first parts at 2 (out0): non-finite in fp16" in result.to_text()


def test_a_correct_bf16_run_parts_nowhere():
    model, batch = _mlp()
    result = _compare(model, batch, "fp32", "bf16")
    assert not result.parted and result.first is None and result.first_grad is None
    errors = [e.error for e in result.diff.entries]
    assert 0 < max(errors) < result.diff.tolerance  # bf16 ran (not bitwise fp32), within 8 eps
    assert math.isclose(result.diff.tolerance, 8 * 2.0**-7)
    assert not result.diff.reference_nonfinite
    assert result.diff.meta_b["compute_dtype"] == "bfloat16"


def test_fp32_against_itself_is_bitwise_equal():
    model, batch = _mlp()
    result = _compare(model, batch, "fp32", "fp32")
    assert all(e.bitwise and e.error == 0 for e in result.diff.entries)
    kinds = {e.kind for e in result.diff.entries}
    assert kinds == {"forward", "grad", "loss"}
    grads = [e.module for e in result.diff.entries if e.kind == "grad"]
    assert grads == ["0", "2", "4"]  # the modules that own parameters


def test_the_model_is_left_as_it_was():
    model, batch = _mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _compare(model, batch, "fp32", "bf16")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_a_record_read_back_compares_as_in_one_process(tmp_path):
    model, batch = _mlp()
    loss_fn = nn.functional.cross_entropy
    record(model, "fp32", out=tmp_path / "a", batch=batch, loss_fn=loss_fn)
    with pytest.warns(PrecisionWarning):
        record(model, "fp16", out=tmp_path / "b", batch=batch, loss_fn=loss_fn)
    replayed = compare_records(tmp_path / "a", tmp_path / "b")
    live = _compare(model, batch, "fp32", "fp16")
    assert replayed.to_dict()["entries"] == live.to_dict()["entries"]
    side = load_record(tmp_path / "b")
    assert side.setting == "fp16" and side.meta["loss_scale"] == 2.0**16


def test_a_record_keeps_a_bounded_sample_of_each_tensor():
    torch.manual_seed(0)
    model = nn.Linear(1000, 100)  # weight gradient: 100k values
    x, y = torch.randn(8, 1000), torch.randn(8, 100)
    side = record(model, "fp32", batch=(x, y), loss_fn=nn.functional.mse_loss, max_values=64)
    assert max(len(v) for v in side.samples.values()) <= 64
    grad = next(e for e in side.entries if e.kind == "grad")
    assert grad.numel == 100 * 1000 + 100
    nn.functional.mse_loss(model(x), y).backward()  # the plain fp32 step: the control
    flat = torch.cat([model.weight.grad.reshape(-1), model.bias.grad])
    expected = flat[:: math.ceil(flat.numel() / 64)][:64].numpy()  # every k-th value
    np.testing.assert_array_equal(side.samples[grad.key], expected)


def test_settings_are_read_and_refused_by_name():
    assert parse_setting("bf16+compile@runs/a") == parse_setting("BF16 + compile@runs/a").__class__(
        spelled="bf16+compile@runs/a", precision="bf16", compile=True, weights="runs/a"
    )
    assert parse_setting("compile").precision == "fp32" and parse_setting("eager").compile is False
    with pytest.raises(ConfigurationError, match="b: unknown precision 'bf61'.*'bf16'"):
        parse_setting("bf61", "b")
    with pytest.raises(ConfigurationError, match="tolerance: 0 is invalid"):
        ampkit.compare("gpt", "fp32", "bf16", tolerance=0)
    with pytest.raises(ConfigurationError, match="needs batch="):
        ampkit.compare(nn.Linear(2, 2), "fp32", "bf16")


def test_two_checkpoints_part_at_the_layer_whose_weights_differ(tmp_path):
    from ampkit.checkpoint.weights import write_weights

    model, batch = _mlp()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    write_weights(tmp_path / "a.safetensors", state)
    state["2.weight"] = state["2.weight"] * 1.1  # a later checkpoint moved one layer
    write_weights(tmp_path / "b.safetensors", state)
    result = _compare(
        model, batch, f"fp32@{tmp_path / 'a.safetensors'}", f"fp32@{tmp_path / 'b.safetensors'}"
    )
    assert result.first is not None and result.first.module == "2"
    upstream = [e for e in result.diff.entries if e.module in ("0", "1") and e.kind == "forward"]
    assert upstream and all(e.bitwise for e in upstream)  # the same weights before it
    other = nn.Linear(3, 3)
    with pytest.raises(
        ConfigurationError, match=r"the weights of .* do not fit the model: 2 missing"
    ):
        ampkit.compare(
            other,
            f"fp32@{tmp_path / 'a.safetensors'}",
            "fp32",
            batch=(torch.randn(2, 3), torch.randn(2, 3)),
            loss_fn=nn.functional.mse_loss,
        )

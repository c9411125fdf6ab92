"""diagnose() names exactly the modules built to fail, with the right kind and phase."""

from __future__ import annotations

import json
import math

import pytest
import torch
from doctor_models import cancellation, division_by_zero, healthy, overflowing, tiny_gradients
from torch import nn

import ampkit
from ampkit.precision.hardware import HardwareInfo
from ampkit.precision.stats import format_limits

FP16 = format_limits()["fp16"]
VOLTA = HardwareInfo(
    device=torch.device("cuda", 0), name="Test V100", cuda_capability=(7, 0), cuda_bf16=False
)
#: A device that runs fp16 and bf16 well: these tests are about the numerics, the same on any
#: machine (tests/doctor/test_advice.py holds what each device is advised).
AMPERE = HardwareInfo(
    device=torch.device("cuda", 0), name="Test A100", cuda_capability=(8, 0), cuda_bf16=True
)


def _keys(report: ampkit.NumericsReport) -> list[tuple[str, str, str]]:
    return [(f.module, f.kind, f.phase) for f in report.findings]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_healthy_model_has_no_findings(precision):
    model, closure = healthy()
    report = ampkit.diagnose(model, closure, precision, steps=2, hardware=AMPERE)
    assert report.findings == ()
    assert report.recommendation.precision == precision
    assert report.recommendation.keep_fp32 == ()
    assert {r.name for r in report.rows} == {n for n, _ in model.named_modules()}


def test_activation_overflow_names_the_layer_and_recommends_bf16():
    model, closure = overflowing()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=AMPERE)
    assert _keys(report) == [("mid", "overflow", "forward")]
    finding = report.findings[0]
    assert finding.precision == "fp16"
    assert finding.numbers["max_abs"] >= FP16.overflow_at > finding.numbers["input_max"]
    row = report.row("mid")
    assert row.forward.fits["fp16"].overflow > 0
    assert row.forward.fits["bf16"].overflow == 0
    rec = report.recommendation
    assert (rec.precision, rec.init_scale, rec.keep_fp32) == ("bf16", None, ())
    assert math.isinf(row.rel_error["fp16"])  # re-run in fp16 it really overflows


def test_without_bf16_the_islands_cover_the_layer_and_its_consumer_and_fix_fp16():
    model, closure = overflowing()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=VOLTA)
    rec = report.recommendation
    assert rec.precision == "fp16"
    assert rec.keep_fp32 == ("mid", "post")
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.float16):
        assert not torch.isfinite(model(x)).all()  # control: plain fp16 autocast breaks
        with ampkit.keep_fp32(model, rec.keep_fp32):
            assert torch.isfinite(model(x)).all()


def test_tiny_gradients_underflow_in_backward_only_in_that_layer():
    model, closure = tiny_gradients()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=AMPERE)
    assert _keys(report) == [("aux", "underflow", "backward")]
    scale = report.loss_scale
    assert scale < 2**16 and math.frexp(scale)[0] == 0.5
    assert 1e-9 * scale < FP16.smallest_normal  # so every output gradient of aux is subnormal
    finding = report.findings[0]
    assert finding.numbers["loss_scale"] == scale
    aux_outputs, aux_values = 32 * 4, 32 * 4 + 16 * 4 + 4  # output grads + weight + bias grads
    lost = finding.numbers["underflow_fraction"] + finding.numbers["subnormal_fraction"]
    assert lost >= aux_outputs / aux_values
    assert report.row("aux").backward.max_abs < 1e-6
    assert report.row("aux").backward.fits["bf16"].lost == 0
    assert report.recommendation.precision == "bf16"


def test_division_by_zero_names_the_block_in_forward_and_nothing_downstream():
    model, closure = division_by_zero()
    report = ampkit.diagnose(model, closure, "fp16", steps=1)
    assert _keys(report) == [("blocks.1", "non-finite", "forward")]
    finding = report.findings[0]
    assert finding.precision == "fp32" and finding.step == 1 and finding.dtype == "float32"
    ((low, high),) = finding.input_ranges
    assert math.isfinite(low) and math.isfinite(high)
    assert "no precision setting fixes" in " ".join(report.recommendation.reasons)


def test_cancellation_is_precision_loss_in_the_block_not_in_its_linear():
    model, closure = cancellation()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=AMPERE)
    assert _keys(report) == [("shifted", "precision-loss", "forward")]
    assert report.row("shifted").rel_error["fp16"] > 0.05
    assert report.row("shifted.fc").rel_error["fp16"] < 1e-3
    rec = report.recommendation
    assert (rec.precision, rec.keep_fp32) == ("fp16", ("shifted",))
    x = torch.randn(16, 8)
    with torch.no_grad():
        reference = model.shifted(model.stem(x))
        with ampkit.keep_fp32(model, rec.keep_fp32), torch.autocast("cpu", dtype=torch.float16):
            fixed = model.shifted(model.stem(x)).float()
        with torch.autocast("cpu", dtype=torch.float16):
            broken = model.shifted(model.stem(x)).float()

    def error(y: torch.Tensor) -> float:
        return float((y - reference).norm() / reference.norm())

    assert error(fixed) < 0.01 < 0.05 < error(broken)


def test_model_parameters_grads_and_hooks_are_as_before():
    model, closure = tiny_gradients()
    closure().backward()
    before = {n: (p.detach().clone(), p.grad.clone()) for n, p in model.named_parameters()}
    ampkit.diagnose(model, closure, "fp16", steps=2)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name][0]) and torch.equal(p.grad, before[name][1])
        assert not p._backward_hooks
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


def test_hooks_are_removed_when_the_closure_raises():
    model, _ = healthy()

    def closure() -> torch.Tensor:
        model(torch.randn(2, 8))
        raise RuntimeError("user bug")

    with pytest.raises(RuntimeError, match="user bug"):
        ampkit.diagnose(model, closure, "fp16", steps=1)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(not p._backward_hooks for p in model.parameters())


@pytest.mark.parametrize(
    ("closure", "match"),
    [
        (lambda: 1.0, "returned a float"),
        (lambda: torch.ones(3, requires_grad=True), "shape \\(3,\\)"),
        (lambda: torch.tensor(1.0), "does not require grad"),
    ],
)
def test_bad_closure_raises_configuration_error(closure, match):
    with pytest.raises(ampkit.ConfigurationError, match=match):
        ampkit.diagnose(nn.Linear(2, 2), closure, "fp16", steps=1, with_precision_map=False)


def test_bad_arguments_raise():
    model, closure = healthy()
    with pytest.raises(ampkit.ConfigurationError, match="unknown precision 'fp17'"):
        ampkit.diagnose(model, closure, "fp17")
    with pytest.raises(ampkit.ConfigurationError, match="steps=0"):
        ampkit.diagnose(model, closure, "fp16", steps=0)
    with pytest.raises(ampkit.ConfigurationError, match="init_scale=1000"):
        ampkit.diagnose(model, closure, "fp16", init_scale=1000)
    with pytest.raises(ampkit.ConfigurationError, match="is torch.float16"):
        ampkit.diagnose(nn.Linear(2, 2).half(), closure)


def test_json_is_strict_and_round_trips_the_findings(tmp_path):
    model, closure = overflowing()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=AMPERE)
    data = json.loads(report.to_json(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text()) == data
    assert [(f["module"], f["kind"], f["phase"]) for f in data["findings"]] == _keys(report)
    assert data["recommendation"]["precision"] == "bf16"
    mid = next(r for r in data["rows"] if r["name"] == "mid")
    assert mid["rel_error"]["fp16"] is None  # inf is not JSON: written as null


def test_precision_map_shows_what_autocast_did():
    model, closure = healthy()
    report = ampkit.diagnose(model, closure, "bf16", steps=1)
    dtypes = {r.module: r.output for r in report.precision_map}
    assert dtypes["mid"] == "bfloat16" and dtypes["trunk.fc"] == "bfloat16"
    assert report.precision_map[0].params == ()
    text = report.to_text()
    assert "findings: none" in text and "precision map" in text and "trunk.fc" in text


def test_overflow_in_an_fp32_output_is_flagged_with_where_it_really_breaks():
    from doctor_models import exp_in_fp32

    model, closure = exp_in_fp32()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=VOLTA)
    # the consumer's weight gradient (inputs ~1.6e5) overflows fp16 even at loss scale 1
    assert _keys(report) == [("0", "overflow", "forward"), ("1", "overflow", "backward")]
    assert report.loss_scale == 1.0 and report.findings[1].numbers["loss_scale"] == 1.0
    assert report.findings[0].numbers["autocast_output_fp32"] == 1.0
    assert "autocast keeps this module's output in fp32" in report.findings[0].message
    assert {r.module: r.output for r in report.precision_map}["0"] == "float32"
    keep = report.recommendation.keep_fp32
    assert keep == ("0", "1")  # the consumer casts the fp32 output down: it needs fp32 too
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.float16):
        assert not torch.isfinite(model(x)).all()
        with ampkit.keep_fp32(model, keep):
            assert torch.isfinite(model(x)).all()

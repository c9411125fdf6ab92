"""detect_nonfinite names the module that made the first inf/NaN, in forward or backward."""

from __future__ import annotations

import math

import pytest
import torch
from doctor_models import division_by_zero, healthy, overflowing
from torch import nn

import ampkit


def _no_hooks(model: nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules()) and all(
        not p._backward_hooks for p in model.parameters()
    )


def test_division_by_zero_is_found_in_the_block_in_forward():
    model, closure = division_by_zero()
    with ampkit.detect_nonfinite(model) as probe:
        closure().backward()
        first = probe.first
    assert (first.module, first.kind, first.phase) == ("blocks.1", "non-finite", "forward")
    assert (first.step, first.dtype, first.precision, first.module_type) == (
        1,
        "float32",
        "fp32",
        "DivBlock",
    )
    ((low, high),) = first.input_ranges
    assert math.isfinite(low) and math.isfinite(high) and low < high
    assert "blocks.1 (DivBlock)" in str(first) and "step 1" in str(first)
    assert _no_hooks(model)


def test_healthy_model_leaves_first_none_and_counts_steps():
    model, closure = healthy()
    with ampkit.detect_nonfinite(model) as probe:
        for _ in range(3):
            closure().backward()
            probe.on_step()
        assert probe.first is None
        assert probe.step == 3


def test_strict_mode_raises_inside_the_forward_and_removes_its_hooks():
    model, closure = division_by_zero()
    with pytest.raises(ampkit.NonFiniteError, match=r"blocks\.1 \(DivBlock\).*forward at step 1"):
        with ampkit.detect_nonfinite(model, strict=True):
            closure()
    assert _no_hooks(model)
    with pytest.raises(ampkit.NonFiniteError) as info:
        with ampkit.detect_nonfinite(model, strict=True):
            closure()
    assert info.value.finding.module == "blocks.1"
    assert isinstance(info.value, ampkit.AmpkitError)


class SqrtAtZero(nn.Module):
    """Finite forward (``x + sqrt(0)``), infinite backward (d sqrt(u)/du at u = 0)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.sqrt(x - x.detach())


def test_backward_only_inf_is_blamed_on_the_module_whose_backward_made_it():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), SqrtAtZero(), nn.Linear(4, 1))
    x = torch.randn(8, 4)
    with ampkit.detect_nonfinite(model) as probe:
        loss = model(x).sum()
        assert probe.first is None  # forward is finite
        loss.backward()
        first = probe.first
    assert (first.module, first.phase, first.kind) == ("2", "backward", "non-finite")
    assert first.step == 1
    with pytest.raises(ampkit.NonFiniteError, match=r"2 \(SqrtAtZero\).*backward"):
        with ampkit.detect_nonfinite(model, strict=True):
            model(x).sum().backward()


def test_fp16_overflow_under_autocast_names_the_layer_and_dtype():
    model, closure = overflowing()
    with ampkit.detect_nonfinite(model) as probe:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = closure()
    first = probe.first  # readable after the block too
    assert not math.isfinite(float(loss.detach()))
    assert (first.module, first.phase, first.dtype, first.precision) == (
        "mid",
        "forward",
        "float16",
        "fp16",
    )


def test_a_nan_in_the_batch_is_blamed_on_the_inputs():
    model, _ = healthy()
    x = torch.randn(4, 8)
    x[1, 2] = float("nan")
    with ampkit.detect_nonfinite(model) as probe:
        model(x)
    assert probe.first.module == ""
    assert "inputs already hold inf/NaN" in probe.first.message


def test_as_a_step_callback_it_reports_the_step_that_broke():
    model, closure = overflowing()
    with ampkit.detect_nonfinite(model, strict=True) as probe:
        closure().backward()  # step 1: fp32, finite
        probe(None)
        with pytest.raises(ampkit.NonFiniteError, match="step 2"):
            with torch.autocast("cpu", dtype=torch.float16):
                closure()  # step 2: fp16 overflows in mid
    assert probe.first.step == 2 and probe.first.module == "mid"


def test_rejects_what_is_not_a_module():
    with pytest.raises(ampkit.ConfigurationError, match="not a torch.nn.Module"):
        ampkit.detect_nonfinite(lambda x: x)


@pytest.mark.slow
@pytest.mark.timing  # compares measured step times: deselected by default
def test_probe_costs_less_than_anomaly_mode(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks" / "nonfinite_overhead.py"),
            "--rounds",
            "6",
            "--warmup",
            "1",
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    ratios = json.loads(out.read_text())["ratios"]
    assert ratios["detect_nonfinite"]["median"] < ratios["detect_anomaly"]["median"]

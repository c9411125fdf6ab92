"""The doctor on a CUDA device: same findings as on the CPU (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from doctor_models import division_by_zero, overflowing

import ampkit

pytestmark = pytest.mark.gpu


def _on_cuda(case):
    model, _ = case
    model.cuda()
    x, y = torch.randn(32, 8, device="cuda"), torch.randint(0, 4, (32,), device="cuda")
    return model, lambda: torch.nn.functional.cross_entropy(model(x), y)


def test_diagnose_on_cuda_names_the_overflowing_layer():
    model, closure = _on_cuda(overflowing())
    report = ampkit.diagnose(model, closure, "fp16", steps=1)
    assert [(f.module, f.kind, f.phase) for f in report.findings] == [
        ("mid", "overflow", "forward")
    ]
    assert report.device.startswith("cuda")
    assert {r.module: r.output for r in report.precision_map}["mid"] == "float16"


def test_probe_on_cuda_finds_the_division_and_the_fp16_overflow():
    model, closure = _on_cuda(division_by_zero())
    with ampkit.detect_nonfinite(model) as probe:
        closure().backward()
    assert probe.first.module == "blocks.1"
    model, closure = _on_cuda(overflowing())
    with ampkit.detect_nonfinite(model) as probe, torch.autocast("cuda", dtype=torch.float16):
        closure()
    assert (probe.first.module, probe.first.dtype) == ("mid", "float16")

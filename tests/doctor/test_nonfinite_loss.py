"""A model whose fp32 loss is already inf/NaN gets that as its first finding and no advice."""

from __future__ import annotations

import torch

import ampkit


def test_nan_loss_outside_any_module_is_the_first_finding_and_nothing_is_recommended():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))
    x = torch.randn(4, 8)
    report = ampkit.diagnose(
        model, lambda: torch.log(model(x)).mean(), "fp16", steps=2, with_precision_map=False
    )
    first = report.findings[0]
    assert (first.kind, first.precision, first.step) == ("non-finite", "fp32", 1)
    assert "the loss closure() returned is nan in fp32 at step 1" in first.message
    rec = report.recommendation
    assert (rec.precision, rec.init_scale, rec.keep_fp32) == (None, None, ())
    text = report.to_text()
    assert "findings: none" not in text
    assert "precision  none until the inf/NaN is fixed" in text
    assert "MixedPrecision" not in rec.snippet()


def test_a_module_that_makes_nan_in_fp32_also_gets_no_recommendation():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
    x = torch.randn(4, 8)
    report = ampkit.diagnose(
        model, lambda: model(x).mean(), "bf16", steps=1, with_precision_map=False
    )
    assert report.findings[0].module == "0" and report.findings[0].kind == "non-finite"
    assert report.recommendation.precision is None

"""Eager against ``torch.compile`` (inductor, which needs the C++ compiler) end to end on the
CPU: every module's output and gradients recorded under compile, none parting beyond fp32's
expected error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ampkit

pytestmark = pytest.mark.slow  # inductor compiles a kernel per graph: ~20 s on a 2-core CPU


def test_eager_and_compiled_fp32_agree_within_fp32_error():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    batch = (torch.randn(8, 16), torch.randint(0, 4, (8,)))
    result = ampkit.compare(
        model, "eager", "compile", batch=batch, loss_fn=nn.functional.cross_entropy
    )
    assert result.diff.meta_b["compile"] is True and result.diff.meta_a["compile"] is False
    keys = [e.key for e in result.diff.entries]
    assert keys == ["0#0:out0", "1#0:out0", "2#0:out0", "#0:out0", "loss", "0:grad", "2:grad"]
    assert not result.parted, result.to_text()
    assert result.diff.tolerance == 8 * 2.0**-23

"""ampkit.integrations.accelerate.AcceleratorTelemetry with a real accelerate.Accelerator: the
silent fp32 fallback of mixed_precision="fp16" on a CPU is named; on CUDA the skipped steps and
the scale follow the injected overflows."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

accelerate = pytest.importorskip(
    "accelerate", reason="the Accelerate tests need accelerate: pip install 'ampkit[bench]'"
)

from ampkit.errors import ConfigurationError, PrecisionWarning  # noqa: E402
from ampkit.integrations.accelerate import AcceleratorTelemetry  # noqa: E402


def loop(accelerator, overflow: set[int], steps: int = 6):
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    telemetry = AcceleratorTelemetry(accelerator)
    seen = []
    for step in range(steps):
        x = torch.randn(4, 8, device=accelerator.device)
        with accelerator.autocast():
            loss = model(x).float().pow(2).mean()
        accelerator.backward(loss * 1e30 if step in overflow else loss)
        optimizer.step()
        optimizer.zero_grad()
        telemetry.after_step()
        seen.append(telemetry.stats)
    return telemetry, seen


def test_fp16_on_a_cpu_is_fp32_and_the_telemetry_says_so():
    accelerator = accelerate.Accelerator(mixed_precision="fp16", cpu=True)
    with pytest.warns(PrecisionWarning, match="no loss scaler .* fp32 without autocast"):
        telemetry, seen = loop(accelerator, overflow=set())
    assert accelerator.scaler is None and telemetry.scaler is None
    assert [s.skipped_steps for s in seen] == [0] * 6 and seen[-1].steps == 6
    assert seen[-1].scale == 1.0


def test_not_an_accelerator_is_refused():
    with pytest.raises(ConfigurationError, match="not an accelerate.Accelerator"):
        AcceleratorTelemetry(object())


@pytest.mark.gpu
def test_fp16_on_cuda_counts_the_injected_overflows():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    accelerator = accelerate.Accelerator(mixed_precision="fp16")
    telemetry, seen = loop(accelerator, overflow={1, 2, 4})
    assert [s.skipped_steps for s in seen] == [0, 1, 2, 2, 3, 3]
    init = seen[0].scale
    assert [s.scale for s in seen] == [init, init / 2, init / 4, init / 4, init / 8, init / 8]
    assert telemetry.stats.scale_history[-1] == (5, init / 8)  # read after each step
    assert not math.isnan(init)

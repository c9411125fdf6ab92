"""fp8 on a real GPU (compute capability 8.9+): measured plan, compiled training.

Skipped without CUDA; exercised by benchmarks/gpu_bench.py's fp8 part as well.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import LoggingConfig, Trainer, fp8_plan
from ampkit.precision.fp8 import fp8_layer_names

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_fp8_gpu():
    pytest.importorskip("torchao.float8")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("needs fp8 tensor cores (compute capability 8.9+)")


class Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(256, 256)
        self.up = nn.Linear(256, 8192)
        self.big = nn.Linear(8192, 8192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.big(torch.relu(self.up(self.small(x)))).float().pow(2).mean()


def test_plan_is_measured_per_layer_on_the_gpu():
    model = Wide().cuda()
    plan = fp8_plan(model, torch.randn(8192, 256, device="cuda"))
    assert plan.measured
    by_name = {d.name: d for d in plan.layers}
    assert all(d.measured_speedup is not None for d in plan.layers)
    assert by_name["big"].fp8, plan.to_text()  # 8192^3: fp8 pays off on H100/H200
    assert not by_name["small"].fp8, plan.to_text()  # 256-wide: it does not


def test_trainer_fp8_compiles_and_trains():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    x = torch.randn(4096, 1024)
    data = [(x[i : i + 1024], x[i : i + 1024]) for i in range(0, 4096, 1024)]
    trainer = Trainer(
        model,
        lambda p: torch.optim.AdamW(p, lr=1e-3),
        loss_fn=nn.functional.mse_loss,
        max_steps=20,
        precision="fp8",
        logging=LoggingConfig(log_every=5),
    )
    plan = fp8_plan(model.cuda(), data[0], loss_fn=nn.functional.mse_loss, use_size_prior=False)
    trainer.mp.mode.plan = plan
    result = trainer.fit(data)
    assert trainer.compile
    assert fp8_layer_names(model) == list(plan.selected)
    assert result.final_loss < 1.0

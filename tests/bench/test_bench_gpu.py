"""``run_bench`` on a CUDA device (skipped without one)."""

from __future__ import annotations

import pytest

from ampkit.bench import run_bench
from ampkit.bench.workloads import gpt_workload

pytestmark = pytest.mark.gpu


def test_cuda_bench_reports_peak_memory_and_mfu():
    workload = gpt_workload(batch_size=8, seq_len=256, n_layer=4, n_head=8, n_embd=512)
    report = run_bench(
        workload,
        ["fp32", "bf16"],
        device="cuda",
        steps=5,
        warmup=2,
        probe_tolerance=100.0,
        burst_s=None,
    )
    fp32, bf16 = report.variant("fp32"), report.variant("bf16")
    assert report.memory_kind.startswith("CUDA max_memory_allocated")
    assert bf16.memory_bytes < fp32.memory_bytes
    if "H100" in report.device_name or "H200" in report.device_name or "A100" in report.device_name:
        assert 0 < bf16.mfu < 1 and 0 < fp32.mfu < 1
    assert "MFU" in report.render()

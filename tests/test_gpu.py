"""Checks that need a CUDA device (skipped on CPU-only machines)."""

from __future__ import annotations

import pytest
import torch

from ampkit import MixedPrecision, resolve_precision

pytestmark = pytest.mark.gpu


def test_auto_on_this_gpu_follows_compute_capability():
    major, _ = torch.cuda.get_device_capability()
    policy = resolve_precision("auto", "cuda")
    expected = "bf16" if major >= 8 else "fp16" if major == 7 else "fp32"
    assert policy.precision == expected and policy.tf32 == (major >= 8)


def test_fp16_training_on_gpu_tracks_fp32_control():
    def run(precision: str) -> torch.nn.Module:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 8)
        ).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        mp = MixedPrecision(precision, "cuda", max_grad_norm=1.0, tf32=False)
        g = torch.Generator(device="cuda").manual_seed(1)
        for _ in range(10):
            x = torch.randn(64, 256, device="cuda", generator=g)
            y = torch.randint(0, 8, (64,), device="cuda", generator=g)
            with mp, mp.autocast():
                loss = torch.nn.functional.cross_entropy(model(x), y)
            mp.backward(loss)
            assert mp.step(opt).stepped
        return model

    fp16, fp32 = run("fp16"), run("fp32")
    for a, b in zip(fp16.parameters(), fp32.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=5e-3)


def test_session_sets_and_restores_tf32_on_ampere():
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("TF32 needs compute capability 8.0+")
    before = torch.get_float32_matmul_precision()
    with MixedPrecision("fp32", "cuda", tf32=True):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before


def test_fp16_step_synchronises_the_host_at_most_once():
    # the one sync is the scaler's skip decision (found_inf read on the host); clipping, the
    # scale update and the lazily read grad norm must not add any
    import warnings

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 8)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mp = MixedPrecision("fp16", "cuda", max_grad_norm=1.0)
    g = torch.Generator(device="cuda").manual_seed(1)

    def step() -> None:
        x = torch.randn(64, 256, device="cuda", generator=g)
        y = torch.randint(0, 8, (64,), device="cuda", generator=g)
        with mp.autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        mp.backward(loss)
        mp.step(opt)

    with mp:
        for _ in range(3):  # warm-up: lazy optimizer state, cuBLAS handles
            step()
        torch.cuda.synchronize()
        steps = 5
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(steps):
                    step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= steps, [str(w.message) for w in syncs]

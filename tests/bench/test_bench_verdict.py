"""The plain-language verdict, from synthetic measurements."""

from __future__ import annotations

from ampkit.bench.report import VariantResult, decide_verdict


def variant(name, speedup, *, memory=None, loss=2.0, gap=0.0, compiled=False, cl=False, ci=None):
    precision = name.split("+")[0]
    return VariantResult(
        name=name,
        precision=precision,
        compiled=compiled,
        channels_last=cl,
        median_step_s=0.1 / speedup,
        throughput=1000 * speedup,
        speedup_vs_fp32=speedup,
        speedup_vs_fp32_twin=speedup,
        speedup_vs_fp32_twin_iqr=None,
        speedup_vs_fp32_twin_ci=ci,
        memory_bytes=None,
        memory_vs_fp32=memory,
        losses=[3.0, loss],
        final_loss=loss,
        loss_gap_vs_fp32=gap,
        mfu=None,
    )


CPU = {"device_type": "cpu", "device_name": "AMD EPYC", "native_low_precision": False}
GPU = {"device_type": "cuda", "device_name": "NVIDIA H200", "native_low_precision": True}


def test_cpu_without_native_bf16_does_not_pay_off_and_says_why_with_the_ratio():
    v = decide_verdict(
        [variant("fp32", 1.0), variant("bf16", 1 / 15.2, memory=0.62)], matmul_share=0.9, **CPU
    )
    assert v.pays_off is False and v.best == "bf16"
    assert "does not pay off" in v.text
    assert "15.2x slower than fp32" in v.text
    assert "no native bf16" in v.text and "AMD EPYC" in v.text
    assert "saves memory" in v.text


def test_fast_gpu_pays_off():
    v = decide_verdict(
        [variant("fp32", 1.0), variant("bf16", 2.4, memory=0.55), variant("fp16", 2.2)],
        matmul_share=0.8,
        **GPU,
    )
    assert v.pays_off is True and v.best == "bf16"
    assert "2.40x as fast as fp32" in v.text and "0.55x" in v.text


def test_tiny_model_on_a_gpu_is_called_elementwise_bound():
    v = decide_verdict([variant("fp32", 1.0), variant("bf16", 1.02)], matmul_share=0.05, **GPU)
    assert v.pays_off is False
    assert "too small or elementwise-bound" in v.text and "5%" in v.text


def test_not_matmul_bound_without_a_share_estimate_gets_the_generic_reason():
    v = decide_verdict([variant("fp32", 1.0), variant("bf16", 0.95)], matmul_share=None, **GPU)
    assert v.pays_off is False and "not limited by matmul throughput" in v.text


def test_only_fp32_measured_says_so():
    v = decide_verdict([variant("fp32", 1.0)], matmul_share=None, **CPU)
    assert v.pays_off is None and "--precisions fp32,bf16" in v.text


def test_large_loss_gap_is_flagged():
    v = decide_verdict(
        [variant("fp32", 1.0, loss=2.0), variant("bf16", 2.0, loss=2.3, gap=0.3)],
        matmul_share=0.9,
        **GPU,
    )
    assert v.pays_off is True and "+0.300" in v.text and "check accuracy" in v.text


def test_small_loss_gap_is_not_flagged():
    v = decide_verdict(
        [variant("fp32", 1.0, loss=2.0), variant("bf16", 2.0, loss=2.01, gap=0.01)],
        matmul_share=0.9,
        **GPU,
    )
    assert "check accuracy" not in v.text


def test_channels_last_speedup_is_not_credited_to_low_precision():
    fp32_cl = variant("fp32+channels_last", 1.0, cl=True)
    # bf16+channels_last beats eager fp32 (1.5x) but is 6x slower than its fp32 twin
    bf16_cl = VariantResult(
        **{**variant("bf16+channels_last", 1.5, cl=True).__dict__, "speedup_vs_fp32_twin": 1 / 6}
    )
    v = decide_verdict([variant("fp32", 1.0), fp32_cl, bf16_cl], matmul_share=0.9, **CPU)
    assert v.pays_off is False
    assert "6.0x slower than fp32+channels_last" in v.text


def test_noisy_speedup_is_inconclusive_not_a_claim():
    v = decide_verdict(
        [variant("fp32", 1.0), variant("bf16", 1.8, ci=(0.6, 2.5))], matmul_share=0.9, **GPU
    )
    assert v.pays_off is None and "Inconclusive" in v.text and "0.60x to 2.50x" in v.text


def test_noisy_slowdown_is_inconclusive_too():
    v = decide_verdict(
        [variant("fp32", 1.0), variant("bf16", 0.8, ci=(0.5, 1.4))], matmul_share=0.9, **GPU
    )
    assert v.pays_off is None


def test_a_tight_interval_keeps_the_verdict():
    v = decide_verdict(
        [variant("fp32", 1.0), variant("bf16", 1 / 15, ci=(1 / 16, 1 / 14))],
        matmul_share=0.9,
        **CPU,
    )
    assert v.pays_off is False

"""``run_bench`` end to end on tiny models (few steps: mechanics, not speed)."""

from __future__ import annotations

import json

import pytest
import torch

from ampkit.bench import run_bench
from ampkit.bench.report import SCHEMA
from ampkit.bench.workloads import gpt_workload
from ampkit.errors import ConfigurationError

FAST = {"steps": 3, "warmup": 1, "probe_tolerance": 100.0, "burst_s": None}


def tiny_gpt():
    return gpt_workload(batch_size=2, seq_len=16, n_layer=1, n_embd=32, n_head=2)


def test_gpt_fp32_vs_bf16():
    # activations (16 x 64 tokens x width 32) outweigh the bf16 weight copies autocast saves
    workload = gpt_workload(batch_size=16, seq_len=64, n_layer=1, n_embd=32, n_head=2)
    report = run_bench(workload, ["fp32", "bf16"], device="cpu", **FAST)
    fp32, bf16 = report.variant("fp32"), report.variant("bf16")
    assert [v.name for v in report.variants] == ["fp32", "bf16"]
    assert len(fp32.losses) == len(bf16.losses) == 4  # warm-up + timed
    assert fp32.speedup_vs_fp32 == 1.0 and bf16.speedup_vs_fp32 > 0
    assert fp32.loss_gap_vs_fp32 == 0.0
    # same weights, same first batch: the first losses agree to bf16 precision
    assert bf16.losses[0] == pytest.approx(fp32.losses[0], rel=1e-2)
    # bf16 saves its activations in 2 bytes instead of 4 (LayerNorm/softmax stay fp32)
    assert 0.4 < bf16.memory_vs_fp32 < 0.9
    assert report.unit == "tokens" and fp32.throughput == pytest.approx(1024 / fp32.median_step_s)
    assert report.flops_per_step == workload.flops_per_step
    assert fp32.mfu is None  # CPU: no peak table
    assert report.verdict.pays_off is not None and report.verdict.text
    assert "fp32" in report.render() and report.verdict.text in report.render()
    inline = report._repr_html_()  # the notebook shows the printed table
    assert inline.startswith("<pre>") and "fp32" in inline and inline.endswith("</pre>")


def test_json_document(tmp_path):
    report = run_bench(tiny_gpt(), ["fp32", "bf16"], device="cpu", **FAST)
    path = tmp_path / "b.json"
    report.write_json(path)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA
    for key in (
        "model",
        "device",
        "device_name",
        "torch_version",
        "steps",
        "warmup",
        "rounds_kept",
        "probe_spread",
        "memory_kind",
        "flops_per_step",
        "variants",
        "verdict",
        "notes",
    ):
        assert key in data
    row = data["variants"][1]
    assert set(row) >= {
        "name",
        "precision",
        "median_step_s",
        "throughput",
        "speedup_vs_fp32",
        "memory_bytes",
        "losses",
        "final_loss",
        "loss_gap_vs_fp32",
        "mfu",
    }
    assert isinstance(row["losses"], list) and len(row["losses"]) == 4
    assert set(data["verdict"]) == {"pays_off", "text", "best"}


def test_fp32_is_always_the_baseline_and_aliases_dedupe():
    report = run_bench(tiny_gpt(), ["bf16-mixed", "bfloat16"], device="cpu", **FAST)
    assert [v.name for v in report.variants] == ["fp32", "bf16"]
    assert any("baseline" in n for n in report.notes)


def test_fp16_on_cpu_becomes_a_note_not_a_warning():
    report = run_bench(tiny_gpt(), ["fp32", "fp16"], device="cpu", **FAST)
    assert any("emulated" in n for n in report.notes)


def test_global_torch_state_is_restored():
    rng = torch.get_rng_state()
    matmul = torch.get_float32_matmul_precision()
    run_bench(tiny_gpt(), ["fp32", "bf16"], device="cpu", **FAST)
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_float32_matmul_precision() == matmul
    assert torch.is_autocast_enabled("cpu") is False


def test_rng_untouched_when_building_a_builtin_model():
    rng = torch.get_rng_state()
    tiny_gpt()
    run_bench("convnet", ["fp32"], device="cpu", batch_size=2, **FAST)
    assert torch.equal(torch.get_rng_state(), rng)


def test_channels_last_and_compile_variants(user_models):
    report = run_bench("convnet", ["fp32"], device="cpu", batch_size=2, channels_last=True, **FAST)
    assert [v.name for v in report.variants] == ["fp32", "fp32+channels_last"]
    cl = report.variant("fp32+channels_last")
    assert cl.channels_last and cl.losses[0] == pytest.approx(report.variant("fp32").losses[0])
    compiled = run_bench(
        f"{user_models}:tiny", ["fp32"], device="cpu", compile=True, compile_backend="eager", **FAST
    )
    assert [v.name for v in compiled.variants] == ["fp32", "fp32+compile"]
    assert compiled.variant("fp32+compile").losses == pytest.approx(compiled.variant("fp32").losses)


def test_user_model_flops_are_counted(user_models):
    report = run_bench(f"{user_models}:tiny", ["fp32"], device="cpu", batch_size=4, **FAST)
    # forward 2*B*(16*32 + 32*4); backward twice that, minus the input gradient of layer 1
    forward = 2 * 4 * (16 * 32 + 32 * 4)
    assert report.flops_per_step == 3 * forward - 2 * 4 * 16 * 32


def test_channels_last_on_the_gpt_is_refused():
    with pytest.raises(ConfigurationError, match="--channels-last"):
        run_bench(tiny_gpt(), ["fp32"], device="cpu", channels_last=True, **FAST)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"steps": 0}, "--steps"), ({"warmup": 0}, "--warmup"), ({"batch_size": 0}, "--batch-size")],
)
def test_invalid_settings(kwargs, needle):
    with pytest.raises(ConfigurationError, match=needle):
        run_bench("gpt", ["fp32"], device="cpu", **{**FAST, **kwargs})


def test_unknown_precision_names_the_flag():
    with pytest.raises(ConfigurationError, match="--precisions: unknown precision 'bf61'"):
        run_bench("gpt", ["bf61"], device="cpu", **FAST)


def test_few_steady_rounds_are_flagged():
    import itertools

    probes = itertools.cycle([1.0, 1.0, 5.0, 5.0])  # the machine keeps changing speed
    report = run_bench(
        tiny_gpt(),
        ["fp32"],
        device="cpu",
        steps=6,
        warmup=1,
        probe_tolerance=0.25,
        burst_s=None,
        probe=lambda: next(probes),
    )
    assert 0 < report.rounds_kept < 3
    assert any("steady machine" in n for n in report.notes)
    assert report.matmul_share is None  # a custom probe says nothing about matmul speed


def test_steady_run_has_no_such_note():
    report = run_bench(
        tiny_gpt(),
        ["fp32"],
        device="cpu",
        steps=4,
        warmup=1,
        probe_tolerance=0.25,
        burst_s=None,
        probe=lambda: 1.0,
    )
    assert report.rounds_kept == 4
    assert not any("steady machine" in n for n in report.notes)


def test_a_budget_adds_rounds_and_the_report_says_why_it_stopped():
    report = run_bench(tiny_gpt(), ["fp32", "bf16"], device="cpu", **FAST, budget_s=1.0)
    sampling = report.sampling
    assert sampling is not None and sampling.min_rounds == 3 and sampling.budget_s == 1.0
    assert sampling.stopped in ("decided", "budget")
    assert report.steps == sampling.rounds >= 3  # the header counts the rounds run
    assert len(report.variant("bf16").losses) == 1 + sampling.rounds  # warm-up + timed
    ci = report.variant("bf16").speedup_vs_fp32_twin_ci
    assert ci is not None and ci[0] <= report.variant("bf16").speedup_vs_fp32_twin <= ci[1]
    # the verdict and the stop agree: decided is a definite verdict; an inconclusive one ran
    # out of budget and says what was measured (under 6 rounds, before a 95% interval exists,
    # the whole range may still decide the verdict)
    if sampling.stopped == "decided":
        assert report.verdict.pays_off is not None
    if report.verdict.pays_off is None:
        assert sampling.stopped == "budget" and "Measured" in report.verdict.text
    if sampling.rounds >= 6:
        assert (report.verdict.pays_off is not None) is (sampling.stopped == "decided")
    assert f"rounds  {sampling.rounds} timed in" in report.render()
    assert report.to_dict()["sampling"]["stopped"] == sampling.stopped


def test_without_a_budget_exactly_the_steps_run():
    report = run_bench(tiny_gpt(), ["fp32", "bf16"], device="cpu", **FAST)
    assert report.sampling is not None and report.sampling.stopped == "fixed"
    assert report.steps == 3 and len(report.variant("bf16").losses) == 4

"""Hugging Face GPT-2, BERT (masked LM) and T5 end to end, built from tiny configs with random
weights (no downloads): MixedPrecision in fp32/bf16/fp16, the Trainer (dict batches, eval,
checkpoint and resume with tied weights), diagnose, bench --model hf:..., and predict."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch
from click.testing import CliRunner
from snapshots import assert_same, params

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face tests need transformers: pip install 'ampkit[hf]'"
)


import ampkit  # noqa: E402
from ampkit.cli import main  # noqa: E402
from ampkit.models.resolve import BuiltModel, build_model  # noqa: E402
from ampkit.precision.batches import batch_size_of  # noqa: E402

MODELS = ["gpt2", "bert-base-uncased", "t5-small"]
SEQ = 16
fp16_on_cpu = pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")


def build(name: str, batch_size: int = 2) -> BuiltModel:
    return build_model(f"hf:{name}:tiny,seq_len={SEQ}", batch_size=batch_size)


def tied(model: torch.nn.Module) -> bool:
    """The input embedding and the LM head are one tensor (all three models tie them)."""
    head = model.get_output_embeddings().weight
    return head is model.get_input_embeddings().weight


# -- MixedPrecision: the README loop on a real model, against torch's own AMP loop ----------


def _reference_step(model, optimizer, batch, precision, scaler) -> None:
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        loss = model(**batch).loss
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    optimizer.zero_grad(set_to_none=True)


@fp16_on_cpu
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("name", MODELS)
def test_readme_loop_matches_torch_amp_step_for_step(name, precision):
    ours, ref = build(name), build(name)
    opt = torch.optim.AdamW(ours.model.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    with ampkit.MixedPrecision(precision, "cpu") as mp:
        for step in range(2):
            batch = ours.batch(step)
            torch.manual_seed(step)  # the same dropout masks in both runs
            with mp.autocast():
                output = ours.model(**batch)
            mp.backward(output)  # a ModelOutput: its .loss is used
            result = mp.step(opt)
            torch.manual_seed(step)
            _reference_step(ref.model, ref_opt, batch, precision, scaler)
            # fp16 may skip a step at the initial scale (an fp16 overflow), as GradScaler does
            assert result.stepped or precision == "fp16"
            if scaler is not None:
                assert result.scale == scaler.get_scale()
    # bitwise: in fp32 the engine adds nothing; in bf16/fp16 it runs the same autocast ops
    # and power-of-two (un)scaling as torch.amp
    assert_same(params(ours.model), params(ref.model))
    assert tied(ours.model)
    assert all(p.dtype == torch.float32 for p in ours.model.parameters())


@fp16_on_cpu
def test_half_model_under_fp16_is_refused_before_any_update():
    built = build("gpt2")
    model = built.model.half()
    before = params(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mp = ampkit.MixedPrecision("fp16", "cpu")
    with mp.autocast():
        out = model(**built.batch(0))
    mp.backward(out)
    with pytest.raises(ampkit.ConfigurationError, match=r"parameters are fp16.*keeps the weights"):
        mp.step(opt)
    assert_same(params(model), before)


def test_bf16_model_under_mixed_bf16_is_refused():
    built = build("bert-base-uncased")
    model = built.model.to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = ampkit.MixedPrecision("bf16", "cpu")
    with mp.autocast():
        mp.backward(model(**built.batch(0)))
    with pytest.raises(ampkit.ConfigurationError, match="'bf16-true'"):
        mp.step(opt)


def test_backward_of_an_output_without_loss_says_what_to_pass():
    built = build("gpt2")
    mp = ampkit.MixedPrecision("fp32", "cpu")
    output = built.model(input_ids=built.batch(0)["input_ids"])  # no labels: loss is None
    with pytest.raises(ampkit.ConfigurationError, match=r"loss is None .*pass labels="):
        mp.backward(output)


# -- Trainer -------------------------------------------------------------------------------


def test_trainer_counts_dict_batches_and_logs_eval_loss(tmp_path):
    built = build("gpt2", batch_size=3)
    batches = [built.batch(i) for i in range(4)]
    assert batch_size_of(batches[0]) == 3  # a dict batch of (B, T) tensors is B samples
    trainer = ampkit.Trainer(
        built.model,
        torch.optim.AdamW(built.model.parameters(), lr=1e-3),
        max_steps=4,
        precision="bf16",
        device="cpu",
        logging=ampkit.LoggingConfig(
            log_every=2,
            tokens_per_sample=built.tokens_per_sample,
            metrics_file=tmp_path / "metrics.jsonl",
        ),
        eval=ampkit.EvalConfig(every=2, data=batches[:2]),
    )
    trainer.fit(batches)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4]
    for row in rows:
        assert row["tokens_per_s"] == pytest.approx(row["samples_per_s"] * SEQ)
        assert 0 < row["eval_loss"] < 10
    assert rows[-1]["eval_loss"] == pytest.approx(trainer.evaluate(batches[:2]))


def _fit(built: BuiltModel, folder, max_steps: int, resume=None) -> None:
    torch.manual_seed(0)  # dropout masks: every run starts from the same global RNG state
    ampkit.Trainer(
        built.model,
        torch.optim.AdamW(built.model.parameters(), lr=1e-3),
        max_steps=max_steps,
        precision="fp32",
        device="cpu",
        checkpoint=ampkit.CheckpointConfig(folder, every=2, resume=resume),
    ).fit([built.batch(i) for i in range(4)])


@pytest.mark.parametrize("name", MODELS)
def test_checkpoint_and_resume_is_bitwise_with_tied_weights(name, tmp_path):
    whole = build(name)
    _fit(whole, tmp_path / "whole", 4)
    first = build(name)
    _fit(first, tmp_path / "split", 2)
    resumed = build(name)
    _fit(resumed, tmp_path / "split", 4, resume="auto")
    assert_same(params(resumed.model), params(whole.model))
    assert tied(resumed.model)


# -- the doctor ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_diagnose_leaves_the_model_bitwise_unchanged(name):
    built = build(name)
    model, batch = built.model, built.batch(0)

    def outputs() -> torch.Tensor:
        model.eval()
        with torch.no_grad():
            logits = model(**batch).logits
        model.train()
        return logits

    before, buffers = outputs(), [b.clone() for b in model.buffers()]
    torch.manual_seed(7)
    plain = model(**batch).loss.detach()  # dropout on: the masks come from seed 7
    seen: list[torch.Tensor] = []

    def closure() -> torch.Tensor:
        loss = model(**batch).loss
        seen.append(loss.detach())
        return loss

    torch.manual_seed(7)
    rng = torch.get_rng_state()
    report = ampkit.diagnose(model, closure, "bf16", steps=1)
    # the analysed fp32 pass is the plain one: no re-run wrote into a key/value cache
    assert torch.equal(seen[0], plain)
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(outputs(), before)
    assert all(torch.equal(a, b) for a, b in zip(model.buffers(), buffers, strict=True))
    assert model.training and model.config.use_cache is True
    assert all(p.grad is None for p in model.parameters())
    errors = [r.rel_error.get("bf16") for r in report.rows]
    assert all(e == e for e in errors if e is not None)  # every re-run ran (no n/a)


def test_doctor_cli_findings_only_on_gpt2():
    result = CliRunner().invoke(
        main,
        ["doctor", "--model", f"hf:gpt2:tiny,seq_len={SEQ}", "--steps", "1", "--findings-only"],
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ampkit doctor: fp16 on cpu")
    assert "recommendation:" in result.output
    assert "per module" not in result.output and "precision map" not in result.output


# -- bench and predict ---------------------------------------------------------------------


def test_bench_cli_with_an_hf_model(tmp_path):
    out = tmp_path / "bench.json"
    args = ["--model", f"hf:bert-base-uncased:tiny,seq_len={SEQ}", "--batch-size", "2"]
    args += ["--precisions", "fp32,bf16", "--steps", "3", "--budget", "0", "--warmup", "1"]
    args += ["--probe-tolerance", "100", "--no-progress", "--device", "cpu", "--json", str(out)]
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exit_code == 0, result.output
    assert "Hugging Face BertForMaskedLM" in result.output
    data = json.loads(out.read_text())
    assert [v["name"] for v in data["variants"]] == ["fp32", "bf16"]
    losses = [v["losses"] for v in data["variants"]]
    assert losses[0][0] == pytest.approx(losses[1][0], rel=0.05)  # same weights, same batch


@pytest.mark.parametrize("name", MODELS)
def test_predict_keeps_the_model_output_type(name):
    built = build(name)
    model = built.model
    out = ampkit.predict(model, built.batch(0), precision="bf16", device="cpu")
    assert isinstance(out, transformers.utils.ModelOutput)
    assert type(out) is type(model(**built.batch(0)))
    assert out.logits.dtype == torch.float32 and out.loss.dtype == torch.float32
    assert out.logits.shape[:2] == (2, SEQ)
    assert model.training  # the previous mode is restored

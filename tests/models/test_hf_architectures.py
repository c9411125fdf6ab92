"""Hugging Face architectures built from ``hf:<type>:tiny`` configs (no downloads): the head of
each task, padded tokenizer-style batches, what ``:tiny`` shrinks, and (marked slow) the matrix
of decoders, encoders, encoder-decoders, vision, speech, two-tower, MoE and state-space models
through MixedPrecision, Trainer resume, diagnose, predict and bench."""

from __future__ import annotations

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
from ampkit.bench import run_bench  # noqa: E402
from ampkit.cli import main  # noqa: E402
from ampkit.models.resolve import BuiltModel, build_model  # noqa: E402

SEQ = 16
fp16_on_cpu = pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")

#: model type -> (class built, task kind): the matrix of issue 20.
MATRIX = {
    "llama": ("LlamaForCausalLM", "causal LM"),
    "qwen2": ("Qwen2ForCausalLM", "causal LM"),
    "gemma": ("GemmaForCausalLM", "causal LM"),
    "gpt_neox": ("GPTNeoXForCausalLM", "causal LM"),
    "opt": ("OPTForCausalLM", "causal LM"),
    "falcon": ("FalconForCausalLM", "causal LM"),
    "bert": ("BertForMaskedLM", "masked LM"),
    "roberta": ("RobertaForMaskedLM", "masked LM"),
    "deberta-v2": ("DebertaV2ForMaskedLM", "masked LM"),
    "bart": ("BartForConditionalGeneration", "seq2seq LM"),
    "t5": ("T5ForConditionalGeneration", "seq2seq LM"),
    "vit": ("ViTForImageClassification", "image classification"),
    "whisper": ("WhisperForConditionalGeneration", "speech seq2seq"),
    "clip": ("CLIPModel", "contrastive two-tower"),
    "mixtral": ("MixtralForCausalLM", "causal LM"),
    "qwen2_moe": ("Qwen2MoeForCausalLM", "causal LM"),
    "mamba": ("MambaForCausalLM", "causal LM"),
}
DECODERS = ["llama", "qwen2", "gemma", "gpt_neox", "opt", "falcon", "mixtral", "qwen2_moe", "mamba"]


def build(name: str, batch_size: int = 2, extra: str = "", seq_len: int = SEQ) -> BuiltModel:
    seq = "" if name in ("vit",) else f",seq_len={seq_len}"
    return build_model(f"hf:{name}:tiny{seq}{extra}", batch_size=batch_size)


def _logits(output) -> torch.Tensor:
    return output.logits if hasattr(output, "logits") else output.logits_per_image


# -- heads by task and :tiny (fast) --------------------------------------------------------


def test_vit_gets_an_image_classification_head_and_benches():
    built = build("vit")
    assert type(built.model).__name__ == "ViTForImageClassification"
    batch = built.example_batch
    assert set(batch) == {"pixel_values", "labels"}
    assert batch["pixel_values"].shape == (2, 3, 32, 32) and batch["labels"].shape == (2,)
    assert built.unit == "samples" and built.items_per_step == 2
    report = run_bench(built, ["bf16"], device="cpu", steps=3, warmup=1, probe_tolerance=100,
                       burst_s=None, probe=lambda: 1.0)  # fmt: skip
    fp32, bf16 = (v.losses for v in report.variants)
    assert len(fp32) == 4 and all(0 < loss < 5 for loss in fp32 + bf16)
    assert fp32[0] == pytest.approx(bf16[0], rel=0.05)  # the same weights, the same batch


@pytest.mark.parametrize(
    ("name", "cls"),
    [("swin", "SwinForImageClassification"), ("convnext", "ConvNextForImageClassification")],
)
def test_staged_vision_models_get_two_small_stages(name, cls):
    built = build(name)
    assert type(built.model).__name__ == cls and list(built.config.depths) == [1, 1]
    assert built.config.image_size == 32 and built.parameter_count < 100_000
    loss = built.loss(built.model, built.example_batch)
    assert torch.isfinite(loss) and loss.dim() == 0


def test_whisper_is_the_speech_model_with_both_attention_stacks_shrunk():
    built = build("whisper")
    model, config = built.model, built.config
    assert type(model).__name__ == "WhisperForConditionalGeneration"
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (2, 2)
    assert config.d_model == 64 and config.d_model % config.decoder_attention_heads == 0
    batch = built.example_batch
    features = batch["input_features"]
    assert features.shape == (2, config.num_mel_bins, 2 * config.max_source_positions)
    labels = batch["labels"]
    assert labels.shape == (2, SEQ) and (labels[0] >= 0).all()  # row 0 full, others padded
    assert ((labels == -100) == (labels < 0)).all()
    assert torch.isfinite(built.loss(model, batch))


def test_clip_trains_contrastively_and_its_towers_are_shrunk():
    built = build("clip")
    config = built.config
    assert type(built.model).__name__ == "CLIPModel"
    for tower in (config.text_config, config.vision_config):
        assert (tower.hidden_size, tower.num_hidden_layers, tower.num_attention_heads) == (64, 2, 2)
    assert config.text_config.vocab_size == 512 and config.text_config.eos_token_id < 512
    batch = built.example_batch
    assert batch["return_loss"] is True and batch["pixel_values"].shape[-1] == 32
    assert "return_loss" not in built.example_inputs  # inference inputs are tensors only
    loss = built.loss(built.model, batch)
    assert loss.dim() == 0 and torch.isfinite(loss)


def test_experts_are_shrunk_and_every_tiny_model_is_small():
    built = build("qwen2_moe")
    config = built.config
    assert (config.num_experts, config.num_experts_per_tok) == (4, 2)
    assert (config.moe_intermediate_size, config.shared_expert_intermediate_size) == (64, 128)
    assert built.parameter_count < 2_000_000  # 34.7M before the experts were shrunk
    assert build("mixtral").config.num_local_experts == 4


def test_falcon_tiny_skips_its_read_only_head_dim():
    built = build("falcon")
    config = built.config
    assert config.hidden_size == 64 and config.head_dim == 32  # derived: 64 / 2 heads
    assert built.parameter_count < 2_000_000


@pytest.mark.parametrize(
    ("name", "inner"), [("llava", "hf:llama:tiny"), ("gemma3", "hf:gemma3_text:tiny")]
)
def test_multimodal_configs_are_refused_in_one_line_naming_what_is_built(name, inner):
    with pytest.raises(ampkit.ConfigurationError) as info:
        build_model(f"hf:{name}:tiny")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"model: 'hf:{name}:tiny': {name} is a")
    assert "multimodal" in message and "image classification" in message
    assert f"For its text model alone use {inner}." in message


def test_read_only_and_unknown_settings_are_one_line_errors():
    with pytest.raises(ampkit.ConfigurationError, match=r"FalconConfig.head_dim is read-only"):
        build_model("hf:falcon:tiny,head_dim=16")
    with pytest.raises(ampkit.ConfigurationError, match=r"padding='top' is invalid"):
        build_model("hf:llama:tiny,padding=top")


def test_options_win_over_tiny_under_either_name_of_a_setting():
    # GPT-2's num_hidden_layers is n_layer: the option given wins, whichever name it uses
    assert build_model("hf:gpt2:tiny,n_layer=3").config.n_layer == 3
    assert build_model("hf:gpt2:tiny,num_hidden_layers=3").config.n_layer == 3
    medium = build_model("hf:gpt2-medium:tiny").config  # tiny wins over the preset
    assert (medium.n_layer, medium.n_embd, medium.n_head) == (2, 64, 2)


# -- batches as a tokenizer gives them (fast) ------------------------------------------------


def test_text_batches_are_padded_with_masks_types_and_ignored_labels():
    built = build("bert", batch_size=6)
    batch = built.example_batch
    ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    lengths = mask.sum(dim=1)
    assert lengths[0] == SEQ and (lengths < SEQ).any()  # some rows are shorter
    assert torch.equal(mask, (torch.arange(SEQ) < lengths[:, None]).long())  # right padding
    pad = built.config.pad_token_id
    assert (ids[mask == 0] == pad).all() and (ids[mask == 1] != pad).all()
    assert (batch["labels"][mask == 0] == -100).all()
    assert (types[mask == 0] == 0).all() and (types == 1).any()  # a second segment
    assert set(built.example_inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    assert "token_type_ids" not in build("llama").example_batch  # llama takes none


def test_left_padding_and_no_padding_are_options():
    left = build("llama", batch_size=4, extra=",padding=left").example_batch
    mask = left["attention_mask"]
    assert (mask[:, -1] == 1).all() and (mask[:, 0] == 0).any()
    assert torch.equal(left["labels"], left["input_ids"].masked_fill(mask == 0, -100))
    full = build("llama", batch_size=4, extra=",padding=none").example_batch
    assert (full["attention_mask"] == 1).all()


@pytest.mark.parametrize("name", ["bart", "t5", "whisper"])
def test_encoder_decoders_carry_the_decoder_inputs_their_labels_give(name):
    built = build(name, batch_size=3)
    model, batch = built.model.eval(), built.example_batch
    assert "decoder_input_ids" in built.example_inputs  # inference and export need them
    without = {k: v for k, v in batch.items() if k != "decoder_input_ids"}
    with torch.no_grad():  # the model derives the same decoder inputs from the labels
        assert torch.equal(model(**batch).loss, model(**without).loss)


@fp16_on_cpu
@pytest.mark.parametrize("padding", ["right", "left"])
def test_a_padded_batch_gives_finite_logits_in_low_precision(padding):
    built = build("llama", batch_size=4, extra=f",padding={padding}")
    batch = built.example_batch
    assert (batch["attention_mask"] == 0).any()
    for dtype in (torch.bfloat16, torch.float16):
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            out = built.model(**batch)
        assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss), dtype


def test_cli_bench_runs_a_vision_name():
    args = ["bench", "--model", "hf:vit:tiny", "--steps", "3", "--budget", "0", "--warmup", "1"]
    args += ["--precisions", "bf16", "--probe-tolerance", "100", "--no-progress"]
    result = CliRunner().invoke(main, [*args, "--device", "cpu", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "ViTForImageClassification (image classification" in result.output


@pytest.mark.slow
def test_cli_doctor_runs_the_speech_model():
    args = ["doctor", "--model", f"hf:whisper:tiny,seq_len={SEQ}", "--steps", "1"]
    result = CliRunner().invoke(main, [*args, "--findings-only"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ampkit doctor: fp16 on cpu")
    assert "recommendation:" in result.output


# -- the matrix (slow) -------------------------------------------------------------------------


@pytest.mark.slow
@fp16_on_cpu
@pytest.mark.parametrize("name", DECODERS)
def test_decoders_give_finite_logits_on_padded_batches(name):
    built = build(name, batch_size=4)
    batch = built.example_batch
    for dtype in (torch.bfloat16, torch.float16):
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            out = built.model(**batch)
        assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss), (name, dtype)


MATRIX_SEQ = 8  # the matrix runs every stage on short rows (the suite's time budget)


def _mixed_precision_matches_autocast(name: str) -> None:
    ours, ref = build(name, seq_len=MATRIX_SEQ), build(name, seq_len=MATRIX_SEQ)
    opt = torch.optim.AdamW(ours.model.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.model.parameters(), lr=1e-3)
    with ampkit.MixedPrecision("bf16", "cpu") as mp:
        for step in range(2):
            batch = ours.batch(step)
            torch.manual_seed(step)  # the same dropout masks (and MoE jitter) in both runs
            with mp.autocast():
                loss = ours.loss(ours.model, batch)
            mp.backward(loss)
            assert mp.step(opt).stepped
            torch.manual_seed(step)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                ref_loss = ref.loss(ref.model, batch)
            ref_loss.backward()
            ref_opt.step()
            ref_opt.zero_grad(set_to_none=True)
    assert_same(params(ours.model), params(ref.model))


def _fit(built: BuiltModel, folder, max_steps: int, resume=None) -> None:
    torch.manual_seed(0)
    ampkit.Trainer(
        built.model,
        torch.optim.AdamW(built.model.parameters(), lr=1e-3),
        max_steps=max_steps,
        precision="bf16",
        device="cpu",
        checkpoint=ampkit.CheckpointConfig(folder, every=1, resume=resume),
    ).fit([built.batch(i) for i in range(2)])


def _resume_is_bitwise(name: str, tmp_path) -> None:
    whole = build(name, seq_len=MATRIX_SEQ)
    _fit(whole, tmp_path / "whole", 2)
    _fit(build(name, seq_len=MATRIX_SEQ), tmp_path / "split", 1)
    resumed = build(name, seq_len=MATRIX_SEQ)
    _fit(resumed, tmp_path / "split", 2, resume="auto")
    assert_same(params(resumed.model), params(whole.model))


def _diagnose_leaves_the_model_alone(name: str) -> None:
    built = build(name, seq_len=MATRIX_SEQ)
    model, batch = built.model, built.example_batch

    def outputs() -> torch.Tensor:
        model.eval()
        with torch.no_grad():
            logits = _logits(model(**batch))
        model.train()
        return logits

    before, buffers = outputs(), [b.clone() for b in model.buffers()]
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    report = ampkit.diagnose(model, built.closure(), "bf16", steps=1)
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(outputs(), before)
    assert all(torch.equal(a, b) for a, b in zip(model.buffers(), buffers, strict=True))
    assert model.training and all(p.grad is None for p in model.parameters())
    assert report.rows


def _predict_keeps_the_output_type(name: str) -> None:
    built = build(name, seq_len=MATRIX_SEQ)
    model, batch = built.model, built.example_batch
    out = ampkit.predict(model, batch, precision="bf16", device="cpu")
    assert type(out) is type(model(**batch))
    assert _logits(out).dtype == torch.float32 and out.loss.dtype == torch.float32
    assert torch.isfinite(_logits(out)).all() and model.training


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MATRIX))
def test_architecture_matrix(name, tmp_path):
    cls, task = MATRIX[name]
    built = build(name)
    assert type(built.model).__name__ == cls and f"({task};" in built.description
    assert built.parameter_count < 2_000_000, built.parameter_count
    _mixed_precision_matches_autocast(name)
    _resume_is_bitwise(name, tmp_path)
    _diagnose_leaves_the_model_alone(name)
    _predict_keeps_the_output_type(name)
    # bench through the library resolver's name (3 steps; no drift probe or rests: only that
    # it trains, not how fast)
    bench = build_model(f"hf:{name}:tiny", batch_size=2)
    report = run_bench(bench, ["bf16"], device="cpu", steps=3, warmup=1, probe_tolerance=100,
                       burst_s=None, probe=lambda: 1.0)  # fmt: skip
    assert all(len(v.losses) == 4 and all(0 < x < 20 for x in v.losses) for v in report.variants)

"""Export with the inputs a tokenizer gives: ``input_ids`` with a left- and right-padded
``attention_mask`` (and ``token_type_ids`` where the model takes them), Hugging Face models
built from small configs, fp16 and bf16 ONNX checked on ONNX Runtime / the reference evaluator.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
pytest.importorskip("onnx")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import deploy_models  # noqa: E402

import ampkit  # noqa: E402
from ampkit.deploy.signature import padding_positions, random_batches, resolve_signature  # noqa: E402
from ampkit.errors import ConfigurationError, ExportError  # noqa: E402

VOCAB, PAD = 100, 1
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             vocab_size=VOCAB, max_position_embeddings=64)  # fmt: skip


def padded_batch(batch: int = 3, length: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """Row 0 full, row 1 right-padded (5 pads), row 2 left-padded (4 pads), pad id 1."""
    ids = torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, length - 5 :] = 0
    mask[2, :4] = 0
    return ids.masked_fill(mask == 0, PAD), mask


def build(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A random-weight model of architecture ``name`` and its padded inputs."""
    T = transformers
    torch.manual_seed(0)
    ids, mask = padded_batch()
    inputs = {"input_ids": ids, "attention_mask": mask}
    decoder = dict(**SMALL, num_key_value_heads=2, use_cache=False)
    if name == "llama":
        model = T.LlamaForCausalLM(T.LlamaConfig(**decoder))
    elif name == "llama-eager":  # the additive mask filled with finfo(float32).min
        model = T.LlamaForCausalLM(T.LlamaConfig(**decoder, attn_implementation="eager"))
    elif name == "qwen2":
        model = T.Qwen2ForCausalLM(T.Qwen2Config(**decoder))
    elif name == "gemma":
        model = T.GemmaForCausalLM(T.GemmaConfig(**decoder, head_dim=16))
    elif name == "gemma3":
        model = T.Gemma3ForCausalLM(T.Gemma3TextConfig(**decoder, head_dim=16, sliding_window=8))
    elif name == "gpt_neox":
        model = T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**SMALL, use_cache=False))
    elif name == "opt":
        model = T.OPTForCausalLM(T.OPTConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
            vocab_size=VOCAB, max_position_embeddings=64, word_embed_proj_dim=64, use_cache=False,
        ))  # fmt: skip
    elif name == "bart":
        model = T.BartForConditionalGeneration(T.BartConfig(
            d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
            vocab_size=VOCAB, max_position_embeddings=64, use_cache=False,
        ))  # fmt: skip
        inputs["decoder_input_ids"] = ids[:, :6]
    elif name == "roberta":
        model = T.RobertaForMaskedLM(T.RobertaConfig(**{**SMALL, "max_position_embeddings": 70}))
        inputs["token_type_ids"] = torch.zeros_like(ids)
    elif name == "deberta-v2":
        model = T.DebertaV2ForMaskedLM(T.DebertaV2Config(**SMALL, type_vocab_size=2))
        inputs["token_type_ids"] = (torch.arange(ids.shape[1]) >= 6).long().expand_as(ids)
    elif name == "mamba":
        model = T.MambaForCausalLM(T.MambaConfig(
            hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB, state_size=8, use_cache=False
        ))  # fmt: skip
    elif name == "clip":  # eos_token_id 2: pooled at the largest id, a real token here
        tower = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, projection_dim=32)  # fmt: skip
        model = T.CLIPModel(T.CLIPConfig(
            text_config=dict(**tower, vocab_size=VOCAB, max_position_embeddings=64, eos_token_id=2),
            vision_config=dict(**tower, image_size=32, patch_size=8), projection_dim=32,
        ))  # fmt: skip
        inputs["pixel_values"] = torch.randn(
            2, 3, 32, 32, generator=torch.Generator().manual_seed(2)
        )
    elif name == "qwen2_moe":
        model = T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
            **decoder, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        ))  # fmt: skip
    elif name == "mixtral":
        model = T.MixtralForCausalLM(T.MixtralConfig(
            **decoder, num_local_experts=4, num_experts_per_tok=2
        ))  # fmt: skip
    else:
        raise KeyError(name)
    return model.eval(), inputs


def _check_padded_export(tmp_path, name: str, precision: str):
    model, inputs = build(name)
    result = ampkit.export(model, inputs, tmp_path / f"{name}-{precision}.onnx",
                           precision=precision, keep_fp32=[], parity_batches=2)  # fmt: skip
    assert result.passed, result.to_text()
    for report in result.parity:
        for output in report.outputs:
            assert output.nonfinite == 0 and output.reference_nonfinite == 0  # pads included
    return result


def test_llama_fp16_with_left_and_right_padding_passes_and_pads_stay_finite(tmp_path):
    result = _check_padded_export(tmp_path, "llama", "fp16")
    assert result.input_names == ("input_ids", "attention_mask")
    (logits,) = result.parity[0].outputs
    assert (logits.compared, logits.positions) == (3 * 27, 3 * 36)  # 9 pads in each of 3 batches
    assert logits.max_rel <= ampkit.deploy.TOLERANCES["fp16"].rel
    assert logits.decisive_top1 is not None and logits.decisive_top1 >= 0.99


ARCHITECTURES = ["llama-eager", "qwen2", "gemma", "gemma3", "gpt_neox", "opt", "bart", "roberta",
                 "deberta-v2", "mamba", "clip"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_hugging_face_architectures_export_with_a_padded_mask(tmp_path, name, precision):
    result = _check_padded_export(tmp_path, name, precision)
    if name == "llama-eager":  # its finfo(float32).min fill, kept finite in the low format
        assert any("attention-mask fills" in n for n in result.notes), result.notes


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_grouped_moe_matmul_keeps_its_one_line_error(tmp_path, name):
    model, inputs = build(name)
    with pytest.raises(ExportError, match=r"has no ONNX translation") as caught:
        ampkit.export(model, inputs, tmp_path / "moe.onnx", keep_fp32=[])
    assert "\n" not in str(caught.value) and "grouped_mm" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_random_parity_batches_keep_the_padding_and_the_pad_tokens():
    ids, mask = padded_batch()
    signature = resolve_signature(torch.nn.Identity(), {"input_ids": ids, "attention_mask": mask})
    (batch,) = random_batches(signature, 1, seed=3)
    assert torch.equal(batch[1], mask)  # the mask is copied, not drawn
    assert torch.equal(batch[0][mask == 0], ids[mask == 0])  # pads stay pads
    assert not torch.equal(batch[0], ids)  # the tokens are drawn


def test_padding_applies_to_outputs_of_its_side():
    ids, mask = padded_batch()
    names = ("input_ids", "attention_mask", "decoder_input_ids")
    outputs = [np.zeros((3, 6, 100)), np.zeros((3, 12, 64)), np.zeros((3, 64))]
    found = padding_positions(names, (ids, mask, ids[:, :6]), ("logits",
                              "encoder_last_hidden_state", "pooled"), outputs)  # fmt: skip
    assert found[0] is None and found[2] is None  # the decoder's logits; no sequence dimension
    np.testing.assert_array_equal(found[1], mask.numpy() != 0)


def test_a_mask_that_is_not_zero_and_one_is_refused():
    ids, mask = padded_batch()
    with pytest.raises(ConfigurationError, match=r"'attention_mask' holds values \[1, 2\]"):
        resolve_signature(torch.nn.Identity(), {"input_ids": ids, "attention_mask": mask + mask[0]})


def test_keep_fp32_names_matching_no_node_are_one_note_and_not_reported_kept(tmp_path):
    model, inputs = deploy_models.mlp()  # Sequential(Linear, ReLU, Linear)
    result = ampkit.export(model, inputs, tmp_path / "mlp.onnx",
                           keep_fp32=["0", "dropout", "blocks.3"])  # fmt: skip
    assert result.keep_fp32 == {"0": "user"}
    assert "module:0" in result.fp32_nodes.values()
    (note,) = [n for n in result.notes if "keep_fp32" in n]
    assert note.startswith("2 keep_fp32 name(s) match no node of the graph and were not kept: "
                           "'dropout', 'blocks.3'")  # fmt: skip


@pytest.mark.slow
def test_the_dtype_check_names_the_module_before_onnx_runtime_refuses_the_graph():
    # Mamba with a mask, through the fp16 converter alone (no repair): the check finds the
    # relabelled Cast and names its module, which is what ONNX Runtime then refuses
    import onnxruntime as ort

    from ampkit.deploy.capture import capture, to_onnx
    from ampkit.deploy.dtypes import check_dtypes, validate_dtypes
    from ampkit.deploy.lowering import _fp16, plan_fp32_nodes
    from ampkit.deploy.signature import FlatModel, flatten_outputs

    model, inputs = build("mamba")
    signature = resolve_signature(model, inputs)
    with torch.no_grad():
        names = [n for n, _ in flatten_outputs(model(**inputs))]
    proto = to_onnx(capture(FlatModel(model, signature), signature.inputs), signature.names, names)
    plan, _ = plan_fp32_nodes(proto, [])
    converted, _ = _fp16(proto, set(plan), keep_io_types=True)
    problems = check_dtypes(converted)
    casts = [p for p in problems if p.op_type == "Cast" and p.outputs]
    assert casts and casts[0].outputs[0][1:] == ("float32", "float16")
    assert casts[0].module == "backbone.layers.0.mixer"
    with pytest.raises(ExportError, match=r"keep_fp32=\['backbone\.layers\.0\.mixer'"):
        validate_dtypes(converted)
    with pytest.raises(Exception, match="does not match expected type"):
        ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])

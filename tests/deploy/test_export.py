"""``ampkit.export`` on real models: size, parity, what stays fp32, and failures."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")
onnx = pytest.importorskip("onnx")

import deploy_models  # noqa: E402

import ampkit  # noqa: E402
from ampkit.deploy import check_dtypes  # noqa: E402
from ampkit.errors import ConfigurationError, ExportError, ParityError  # noqa: E402

FP16, FP32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT


def _weights_by_dtype(path) -> dict[int, int]:
    model = onnx.load(str(path))
    sizes: dict[int, int] = {}
    for tensor in model.graph.initializer:
        n = 1
        for d in tensor.dims:
            n *= d
        sizes[tensor.data_type] = sizes.get(tensor.data_type, 0) + n
    return sizes


def test_gpt_fp16_onnx_is_half_the_size_and_agrees_with_fp32(tmp_path):
    model, inputs = deploy_models.tiny_gpt()
    out = tmp_path / "gpt.onnx"
    result = ampkit.export(model, inputs, out, precision="fp16")

    assert out.stat().st_size == result.size_bytes
    assert 0.45 < result.size_bytes / result.fp32_size_bytes < 0.6
    weights = _weights_by_dtype(out)
    assert weights[FP16] > 0.95 * sum(weights.values())  # fp32 only for LayerNorm's weights
    graph = onnx.load(str(out)).graph
    assert [i.type.tensor_type.elem_type for i in graph.input] == [onnx.TensorProto.INT64]
    assert [o.type.tensor_type.elem_type for o in graph.output] == [FP32]  # keep_io_types
    assert {r for r in result.fp32_nodes.values()} >= {"op:LayerNormalization", "op:Softmax"}
    assert check_dtypes(onnx.load(str(out))) == []
    inline = result._repr_html_()  # the notebook shows the text report
    assert inline.startswith("<pre>") and "fp16" in inline

    assert result.passed and [r.runtime.split()[0] for r in result.parity] == [
        "onnxruntime",
        "onnx.reference",
    ]
    (logits,) = result.parity[0].outputs
    assert logits.name == "logits" and logits.nonfinite == 0
    assert logits.max_rel <= ampkit.deploy.TOLERANCES["fp16"].rel
    assert logits.top1 >= 0.99
    assert result.parity[0].batches == 4  # the example and three random batches
    # the causal mask's fill, brought to half the fp16 range (a fill plus a fill stays finite)
    assert any("mask fills" in note and "-> -3.275e+04" in note for note in result.notes)
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left beside it


def test_convnet_fp16_with_batchnorm_in_fp32(tmp_path):
    model, inputs = deploy_models.convnet()
    result = ampkit.export(model, inputs, tmp_path / "convnet.onnx", keep_fp32=[])
    assert result.passed
    (output,) = result.parity[0].outputs
    assert output.top1 == 1.0 and output.max_rel < 1e-2


def test_doctor_flagged_module_is_kept_fp32_and_without_it_fp16_overflows(tmp_path):
    model, inputs = deploy_models.overflowing()
    out = tmp_path / "model.onnx"
    result = ampkit.export(model, inputs, out)
    assert result.keep_fp32 == {"0": "doctor"}
    assert "module:0" in result.fp32_nodes.values()
    assert any(n.startswith("doctor: 0 (Linear): activations overflow fp16") for n in result.notes)
    assert result.passed

    out.unlink()
    with pytest.raises(ParityError, match="nothing was written") as caught:
        ampkit.export(model, inputs, out, keep_fp32=[])
    failed = caught.value.result
    assert failed.path is None and not out.exists() and list(tmp_path.iterdir()) == []
    reference = [r for r in failed.parity if r.runtime.startswith("onnx.reference")][0]
    assert reference.outputs[0].nonfinite > 0  # fp16 overflow -> inf -> NaN after LayerNorm


def test_bf16_graph_is_consistent_and_checked_in_the_reference_evaluator(tmp_path):
    model, inputs = deploy_models.convnet()
    out = tmp_path / "convnet-bf16.onnx"
    result = ampkit.export(model, inputs, out, precision="bf16", keep_fp32=[])
    assert result.passed
    loaded = onnx.load(str(out))
    assert check_dtypes(loaded) == []
    # Conv has no bfloat16 in the ONNX schema before opset 22: those nodes stay fp32, reported
    opset = next(o.version for o in loaded.opset_import if o.domain == "")
    convs = [n.name for n in loaded.graph.node if n.op_type == "Conv"]
    reasons = {result.fp32_nodes[name] for name in convs}
    assert reasons == ({f"no-bf16:Conv (opset {opset})"} if opset < 22 else {None} - {None})
    low = [n for n in loaded.graph.node if n.op_type in ("Relu", "Gemm")]
    assert low and all(n.name not in result.fp32_nodes for n in low)
    (report,) = result.parity
    assert report.runtime.startswith("onnx.reference")  # ORT's CPU provider has no bf16 Conv
    assert "no kernel" in report.notes[0]
    assert report.outputs[0].max_rel <= ampkit.deploy.TOLERANCES["bf16"].rel


def test_torch_export_program_under_autocast_reloads_and_agrees(tmp_path):
    model, inputs = deploy_models.tiny_gpt()
    out = tmp_path / "gpt.pt2"
    result = ampkit.export(model, inputs, out, format="torch-export", keep_fp32=[])
    assert result.passed and result.parity[0].runtime.startswith("torch.export.load")
    program = torch.export.load(str(out))
    graph = str(program.graph)
    assert "torch.float16" in graph  # autocast's casts are in the program
    logits = program.module()(*inputs)[0]
    assert logits.dtype == torch.float32
    expected = model(*inputs)["logits"]
    assert (logits.argmax(-1) == expected.argmax(-1)).float().mean() >= 0.99


@pytest.mark.parametrize("name", ["gpt2", "bert", "t5"])
def test_hugging_face_models_export_with_fp16_parity(tmp_path, name):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    if name == "gpt2":
        config = transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32, use_cache=False
        )
        model, inputs = transformers.GPT2LMHeadModel(config), {"input_ids": ids}
    elif name == "bert":
        config = transformers.BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
            vocab_size=128, max_position_embeddings=32,
        )  # fmt: skip
        model = transformers.BertForMaskedLM(config)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    else:
        # T5's SDPA path fails in torch 2.13's ONNX decomposition (a view of a transposed
        # tensor); its eager attention exports.
        config = transformers.T5Config(
            d_model=64, d_ff=128, num_layers=2, num_heads=2, d_kv=32, vocab_size=128,
            use_cache=False, attn_implementation="eager",
        )  # fmt: skip
        model = transformers.T5ForConditionalGeneration(config)
        inputs = {"input_ids": ids, "decoder_input_ids": ids[:, :8]}
    result = ampkit.export(model, inputs, tmp_path / f"{name}.onnx", keep_fp32=[])
    assert result.passed, result.to_text()
    assert result.size_bytes / result.fp32_size_bytes < 0.6
    logits = next(o for o in result.parity[0].outputs if o.name == "logits")
    assert logits.top1 >= 0.99 and logits.nonfinite == 0


def test_unsupported_op_is_named(tmp_path):
    model, inputs = deploy_models.unsupported_op()
    with pytest.raises(ExportError, match=r"the op prims\.zeta \(graph node 'zeta'\)"):
        ampkit.export(model, inputs, tmp_path / "zeta.onnx")
    assert list(tmp_path.iterdir()) == []


def test_specialised_dynamic_dimension_is_named(tmp_path):
    model, inputs = deploy_models.baked_batch()
    batch = torch.export.Dim("batch")
    with pytest.raises(ExportError, match="dynamic dimension 'batch' .* to the constant 2"):
        ampkit.export(model, inputs, tmp_path / "b.onnx", dynamic_shapes=[{0: batch}])
    assert list(tmp_path.iterdir()) == []


def test_dynamic_batch_runs_at_other_batch_sizes(tmp_path):
    model, inputs = deploy_models.mlp()
    batch = torch.export.Dim("batch")
    bigger = [(torch.randn(7, 8),), (torch.randn(1, 8),)]
    result = ampkit.export(
        model, inputs, tmp_path / "m.onnx", keep_fp32=[], dynamic_shapes=[{0: batch}],
        parity_batches=bigger,
    )  # fmt: skip
    assert result.passed and result.parity[0].batches == 3


def test_half_precision_model_is_refused(tmp_path):
    model, inputs = deploy_models.mlp()
    with pytest.raises(ConfigurationError, match="starts from the fp32 model"):
        ampkit.export(model.half(), inputs, tmp_path / "m.onnx")


def test_missing_onnxruntime_names_the_extra(monkeypatch):
    import sys

    from ampkit.deploy.dependencies import require
    from ampkit.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[export\]'"):
        require("onnxruntime")


def test_reference_evaluator_failure_is_a_note_and_onnx_runtime_still_decides(
    tmp_path, monkeypatch
):
    # onnx's reference evaluator has bugs of its own (onnx 1.23 cannot run BERT's fp16 graph
    # at sequence 64); inject such a failure into the fp16 overflow check
    from ampkit.deploy import runtime

    def broken(*args, **kwargs):
        raise ExportError("export: the ONNX reference evaluator could not run the graph (bug).")

    monkeypatch.setattr(runtime, "run_reference", broken)
    model, inputs = deploy_models.mlp()
    result = ampkit.export(model, inputs, tmp_path / "mlp.onnx", keep_fp32=[])
    assert result.passed and len(result.parity) == 1
    assert result.parity[0].runtime.startswith("onnxruntime")
    (note,) = [n for n in result.notes if "reference evaluator" in n]
    assert "checked only as ONNX Runtime computes it" in note


def test_exporter_without_optimize_keyword_is_optimised_after_export(tmp_path, monkeypatch):
    # torch 2.5's torch.onnx.export(dynamo=True) takes no optimize=; present that signature
    # over the real exporter, which then leaves the optimising to ampkit
    real = torch.onnx.export
    optimised = []

    def export_2_5(model, args, *, dynamo, verbose, input_names, output_names):
        program = real(model, args, dynamo=dynamo, verbose=verbose, input_names=input_names,
                       output_names=output_names, optimize=False)  # fmt: skip
        optimise = program.optimize
        program.optimize = lambda: optimised.append(True) or optimise()
        return program

    monkeypatch.setattr(torch.onnx, "export", export_2_5)
    model, inputs = deploy_models.mlp()
    result = ampkit.export(model, inputs, tmp_path / "mlp.onnx", keep_fp32=[])
    assert optimised == [True] and result.passed

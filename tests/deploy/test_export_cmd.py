"""``ampkit export`` in-process: a trained run exported and checked, and one-line errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ampkit.cli import main

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")


def _run(*args: str):
    return CliRunner().invoke(main, ["export", *args])


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ampkit: error: ")
    return lines[0]


def test_help_has_examples():
    result = _run("--help")
    assert result.exit_code == 0
    assert "Examples:" in result.output and "--checkpoint runs/a" in result.output


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "a"
    args = ["train", "--steps", "30", "--seq-len", "32", "--batch-size", "8", "--precision",
            "fp32", "--out", str(out), "--no-progress", "--log-every", "10"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out


def test_trained_gpt_exports_to_half_the_size_with_parity_on_held_out_text(trained_run, tmp_path):
    out = tmp_path / "gpt.onnx"
    result = _run("--checkpoint", str(trained_run), "--out", str(out), "--batches", "3",
                  "--keep-fp32", "gpt.head", "--json", "-")  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the JSON alone on stdout, the text on stderr
    assert data["passed"] and data["path"] == str(out) and out.is_file()
    assert f"exported  {out}" in result.stderr
    assert 0.45 < data["size_bytes"] / data["fp32_size_bytes"] < 0.6
    assert data["keep_fp32"] == {"gpt.head": "user"}
    ort = data["parity"][0]
    assert ort["batches"] == 4 and ort["runtime"].startswith("onnxruntime")
    (logits,) = ort["outputs"]
    assert logits["shape"] == [4, 32, 256] and logits["top1"] >= 0.99 and logits["nonfinite"] == 0


def test_unsupported_op_is_one_line_and_nothing_is_written(tmp_path):
    out = tmp_path / "zeta.onnx"
    result = _run("--model", "deploy_models:unsupported_op", "--out", str(out))
    assert result.exit_code == 1
    assert "the op prims.zeta" in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_specialised_dynamic_batch_is_one_line(tmp_path):
    out = tmp_path / "b.onnx"
    result = _run("--model", "deploy_models:baked_batch", "--dynamic-batch", "--out", str(out))
    assert result.exit_code == 1
    assert "dynamic dimension 'batch'" in _one_error_line(result)
    assert not out.exists()


def test_checkpoint_of_another_model_names_the_file(trained_run, tmp_path):
    out = tmp_path / "mlp.onnx"
    result = _run(
        "--model", "deploy_models:mlp", "--checkpoint", str(trained_run), "--out", str(out)
    )
    assert result.exit_code == 1
    line = _one_error_line(result)
    assert f"{trained_run / 'model.safetensors'} is a checkpoint of another model" in line
    assert not out.exists()


def test_parity_failure_prints_the_table_exits_non_zero_and_writes_nothing(tmp_path):
    out = tmp_path / "model.onnx"
    result = _run("--model", "deploy_models:overflowing", "--keep-fp32", "3", "--out", str(out))
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and "non-finite" in result.stdout
    assert "parity check failed for output(s) output" in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_missing_checkpoint_and_bad_model_spec_are_one_line(tmp_path):
    result = _run("--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "x.onnx"))
    assert result.exit_code == 2 and "does not exist" in _one_error_line(result)
    result = _run("--model", "not a spec", "--out", str(tmp_path / "x.onnx"))
    assert result.exit_code == 2 and "'not a spec' is not a model" in _one_error_line(result)
    result = _run("--model", "hf:nosuch", "--out", str(tmp_path / "x.onnx"))
    assert result.exit_code == 2 and "'nosuch' is neither a checkpoint name" in _one_error_line(
        result
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_hugging_face_model_by_name_exports_with_fp32_outputs_and_parity(tmp_path):
    pytest.importorskip("transformers")
    onnx = pytest.importorskip("onnx")
    out = tmp_path / "bert.onnx"
    result = _run("--model", "hf:bert-base-uncased:tiny", "--out", str(out), "--batches", "1",
                  "--json", "-")  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (
        data["passed"]
        and data["input_names"] == ["input_ids", "attention_mask", "token_type_ids"]
        and data["output_names"] == ["logits"]
    )
    assert 0.45 < data["size_bytes"] / data["fp32_size_bytes"] < 0.65
    graph = onnx.load(str(out)).graph
    (logits,) = graph.output
    assert logits.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert data["parity"][0]["outputs"][0]["top1"] >= 0.99


def test_weights_file_that_is_not_safetensors_is_one_line(tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"not a safetensors file")
    out = tmp_path / "mlp.onnx"
    result = _run("--model", "deploy_models:mlp", "--checkpoint", str(bad), "--out", str(out))
    assert result.exit_code == 2
    assert f"{bad} is not a readable safetensors file" in _one_error_line(result)
    assert not out.exists()


def test_a_factory_with_a_padded_mask_exports_and_leaves_the_pads_out_of_parity(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "bert.onnx"
    result = _run("--model", "deploy_models:padded_bert", "--out", str(out), "--batches", "1",
                  "--keep-fp32", "bert.embeddings.dropout", "--json", "-")  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] and out.is_file()
    assert data["input_names"] == ["input_ids", "attention_mask", "token_type_ids"]
    (logits,) = data["parity"][0]["outputs"]
    assert (logits["compared"], logits["positions"]) == (2 * 23, 2 * 30) and logits[
        "nonfinite"
    ] == 0
    assert data["keep_fp32"] == {}  # Dropout computes nothing in eval mode: no node, one note
    assert "14 of 60 positions are padding" in result.stderr
    assert "1 keep_fp32 name(s) match no node of the graph" in result.stderr

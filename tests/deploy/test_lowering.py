"""The fp16 lowering on hand-made ONNX graphs: what stays fp32, and the graph's IO types."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxconverter_common")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ampkit.deploy import check_dtypes  # noqa: E402
from ampkit.deploy.lowering import lower  # noqa: E402


def _matmul_then_softmax() -> onnx.ModelProto:
    """x @ w -> Softmax -> y: the graph's last node is block-listed (Softmax stays fp32)."""
    weight = numpy_helper.from_array(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
            helper.make_node("Softmax", ["h"], ["y"], name="softmax", axis=-1),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_an_fp32_last_node_keeps_the_graph_output_fp32_without_a_round_trip():
    lowered = lower(_matmul_then_softmax(), "fp16")
    graph = lowered.model.graph
    assert lowered.fp32_nodes == {"softmax": "op:Softmax"}
    assert [o.type.tensor_type.elem_type for o in graph.output] == [TensorProto.FLOAT]
    producer = next(n for n in graph.node if "y" in n.output)
    to = [a.i for a in producer.attribute if a.name == "to"]
    assert to in ([], [TensorProto.FLOAT])  # never cast down to fp16 on the way out
    assert check_dtypes(lowered.model) == []
    x = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], dtype=np.float32)
    (got,) = ReferenceEvaluator(lowered.model).run(None, {"x": x})
    (want,) = ReferenceEvaluator(_matmul_then_softmax()).run(None, {"x": x})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4)


def _masked_scores(fill: float) -> onnx.ModelProto:
    """Additive attention mask as Hugging Face writes it: ``where(mask, 0, fill) + scores``,
    then softmax over the keys, then a value projection; the mask is an int64 input."""
    values = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), "v")
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["mask"], ["keep"], name="to_bool", to=TensorProto.BOOL),
            helper.make_node("Where", ["keep", "zero", "fill"], ["bias"], name="mask_fill"),
            helper.make_node("Add", ["scores", "bias"], ["masked"], name="add_mask"),
            helper.make_node("Add", ["masked", "bias"], ["twice"], name="add_mask_again"),
            helper.make_node("Softmax", ["twice"], ["weights"], name="softmax", axis=-1),
            helper.make_node("MatMul", ["weights", "v"], ["y"], name="attend"),
        ],
        "g",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [
            values,
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
            numpy_helper.from_array(np.array(fill, dtype=np.float32), "fill"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_float32_min_mask_fill_stays_finite_on_a_fully_masked_row(precision):
    # fp32's min is -inf in bf16 and out of fp16's range; a fully masked row (a left-padded
    # position) plus a second mask would be -inf everywhere, and softmax of it NaN
    model = _masked_scores(float(np.finfo(np.float32).min))
    lowered = lower(model, precision)
    assert lowered.saturated and "-3.403e+38 -> " in lowered.saturated[0]
    assert check_dtypes(lowered.model) == []
    scores = np.array([[0.5, -1.0, 2.0, 0.0], [1.0, 0.0, -0.5, 3.0], [9.0, 1.0, 1.0, 1.0]],
                      dtype=np.float32)  # fmt: skip
    mask = np.array([[1, 1, 1, 0], [0, 0, 0, 0], [0, 1, 1, 1]], dtype=np.int64)
    (got,) = ReferenceEvaluator(lowered.model).run(None, {"scores": scores, "mask": mask})
    with np.errstate(all="ignore"):  # fp32 itself: -3.4e38 twice is -inf, the row NaN
        (want,) = ReferenceEvaluator(model).run(None, {"scores": scores, "mask": mask})
    assert np.isfinite(got).all()
    real = [0, 2]  # the fully masked row is padding: its value is undefined, but finite
    np.testing.assert_allclose(got[real], want[real], rtol=2e-2, atol=2e-2)


def test_cast_of_an_integer_mask_to_fp32_becomes_a_cast_to_fp16():
    # Mamba multiplies hidden states by mask.to(float32): the converter relabels the Cast's
    # output fp16 and leaves to=FLOAT, which ONNX Runtime refuses
    weight = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 2, "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
            helper.make_node("Cast", ["mask"], ["m"], name="mask_cast", to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["m", "axis"], ["m3"], name="unsqueeze"),
            helper.make_node("Mul", ["h", "m3"], ["y"], name="apply_mask"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3])],
        [weight, numpy_helper.from_array(np.array([-1], dtype=np.int64), "axis")],
    )
    model = onnx.shape_inference.infer_shapes(  # IR 9: what ONNX Runtime 1.2x loads
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    )
    lowered = lower(model, "fp16")
    assert lowered.relabelled == 1 and check_dtypes(lowered.model) == []
    (cast,) = [n for n in lowered.model.graph.node if n.name == "mask_cast"]
    assert [a.i for a in cast.attribute if a.name == "to"] == [TensorProto.FLOAT16]
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(lowered.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    x = np.arange(24, dtype=np.float32).reshape(2, 4, 3) / 8
    mask = np.array([[1, 1, 0, 0], [0, 1, 1, 1]], dtype=np.int64)
    (got,) = session.run(None, {"x": x, "mask": mask})
    np.testing.assert_array_equal(got, 2 * x * mask[..., None])  # exact: x/8 * 2 fits fp16


def test_keep_fp32_names_map_by_scope_or_by_parameter_and_the_rest_are_returned():
    from ampkit.deploy.lowering import plan_fp32_nodes

    def scoped(node, *modules):
        scopes = ["", "model", *(f"model.{m}" for m in modules), node.name]
        node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=repr(scopes))
        return node

    weight = numpy_helper.from_array(np.ones((3, 3), dtype=np.float32), "model.head.weight")
    graph = helper.make_graph(
        [
            scoped(helper.make_node("Relu", ["x"], ["a"], name="act"), "blocks", "blocks.0"),
            helper.make_node("MatMul", ["a", "model.head.weight"], ["y"], name="head_matmul"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    plan, missing = plan_fp32_nodes(model, ["blocks", "head", "blocks.0.drop", "nowhere"])
    assert plan == {"act": "module:blocks", "head_matmul": "module:head"}
    assert missing == ("blocks.0.drop", "nowhere")

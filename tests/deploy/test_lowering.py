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

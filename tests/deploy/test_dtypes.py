"""The dtype-consistency check on hand-made ONNX graphs."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from ampkit.deploy import check_dtypes, validate_dtypes  # noqa: E402
from ampkit.errors import ExportError  # noqa: E402


def _model(nodes, inputs, outputs, opsets=(("", 18),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _info(name, elem_type, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def test_mixed_add_is_reported_by_node_name():
    model = _model(
        [helper.make_node("Add", ["a", "b"], ["c"], name="residual_add")],
        [_info("a", TensorProto.FLOAT16), _info("b", TensorProto.FLOAT)],
        [_info("c", TensorProto.FLOAT16)],
    )
    problems = check_dtypes(model)
    assert [(p.node, p.op_type) for p in problems] == [("residual_add", "Add")]
    assert dict(problems[0].inputs) == {"a": "float16", "b": "float32"}
    with pytest.raises(ExportError, match="node 'residual_add' \\(Add\\): a is float16, b is"):
        validate_dtypes(model)


def test_mix_behind_inferred_values_is_found():
    """The fp32 input reaches MatMul through a Relu whose output dtype only inference knows."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], [0.5] * 9)
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["h"], name="act"),
            helper.make_node("MatMul", ["h", "w16"], ["y"], name="proj"),
            helper.make_node("Cast", ["w"], ["w16"], name="w_to_fp16", to=TensorProto.FLOAT16),
        ],
        [_info("x", TensorProto.FLOAT)],
        [_info("y", TensorProto.FLOAT16)],
    )
    model.graph.initializer.append(weight)
    assert [p.node for p in check_dtypes(model)] == ["proj"]


def test_consistent_graph_and_ops_with_several_type_variables_pass():
    model = _model(
        [
            helper.make_node("Cast", ["x"], ["x16"], name="down", to=TensorProto.FLOAT16),
            helper.make_node("Gather", ["x16", "idx"], ["g"], name="gather", axis=0),
            helper.make_node("Add", ["g", "g"], ["y"], name="add"),
        ],
        [_info("x", TensorProto.FLOAT), _info("idx", TensorProto.INT64, (2,))],
        [_info("y", TensorProto.FLOAT16)],
    )
    assert check_dtypes(model) == []
    validate_dtypes(model)


def test_custom_op_with_mixed_float_inputs_is_named():
    model = _model(
        [helper.make_node("FusedGelu", ["a", "b"], ["c"], name="my_gelu", domain="com.example")],
        [_info("a", TensorProto.FLOAT16), _info("b", TensorProto.FLOAT)],
        [_info("c", TensorProto.FLOAT16)],
        opsets=(("", 18), ("com.example", 1)),
    )
    problems = check_dtypes(model)
    assert [(p.node, p.op_type) for p in problems] == [("my_gelu", "com.example.FusedGelu")]


def _scoped(node, *modules):
    """Give ``node`` the module path metadata torch's exporter writes."""
    scopes = ["", "model", *(f"model.{m}" for m in modules), node.name]
    node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=repr(scopes))
    return node


def test_cast_whose_output_is_declared_in_another_dtype_is_found_with_its_module():
    # what the fp16 converter made of Mamba's mask: Cast(to=FLOAT) with its output relabelled
    # fp16, so the declarations agree and the computation does not (ONNX Runtime refuses it)
    model = _model(
        [
            _scoped(
                helper.make_node("Cast", ["mask"], ["m"], name="mask_cast", to=TensorProto.FLOAT),
                "backbone",
                "backbone.mixer",
            ),  # fmt: skip
            _scoped(helper.make_node("Mul", ["x", "m"], ["y"], name="masked"), "backbone"),
        ],
        [_info("x", TensorProto.FLOAT16), _info("mask", TensorProto.INT64)],
        [_info("y", TensorProto.FLOAT16)],
    )
    model.graph.value_info.append(_info("m", TensorProto.FLOAT16))
    problems = check_dtypes(model)
    assert [(p.node, p.module) for p in problems] == [
        ("mask_cast", "backbone.mixer"),  # declared fp16, makes fp32
        ("masked", "backbone"),  # so Mul gets fp16 and fp32
    ]
    assert problems[0].outputs == (("m", "float32", "float16"),)
    assert dict(problems[1].inputs) == {"x": "float16", "m": "float32"}
    with pytest.raises(ExportError) as caught:
        validate_dtypes(model)
    message = str(caught.value)
    assert "node 'mask_cast' (Cast) in module 'backbone.mixer': output m is float32" in message
    assert "keep_fp32=['backbone.mixer', 'backbone']" in message


def test_a_node_without_scopes_takes_the_module_of_its_producer():
    from ampkit.deploy.scopes import module_of

    model = _model(
        [
            _scoped(helper.make_node("Relu", ["x"], ["h"], name="act"), "encoder", "encoder.0"),
            helper.make_node("Cast", ["h"], ["y"], name="inserted_cast", to=TensorProto.FLOAT16),
        ],
        [_info("x", TensorProto.FLOAT)],
        [_info("y", TensorProto.FLOAT16)],
    )
    assert module_of(model, "act") == "encoder.0"
    assert module_of(model, "inserted_cast") == "encoder.0"  # a converter's cast: no metadata
    assert module_of(model, "no_such_node") == ""

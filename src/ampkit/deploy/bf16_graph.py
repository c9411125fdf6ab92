"""Our own fp32 -> bf16 graph pass for ONNX models.

Why our own: the maintained converters (``onnxconverter_common.float16`` and its copy in
``onnxruntime.transformers``) convert to fp16 only; none converts a graph to bfloat16 with a
block-list. bf16 has fp32's exponent range, so unlike fp16 there is nothing to clip: the pass
only has to decide which nodes compute in bf16 and keep every node's inputs in one dtype.

The rule, node by node (topological order):

* A node computes in bf16 when it is not on the fp32 list, has no subgraph, has an ONNX schema
  whose type variable for its fp32 inputs admits ``tensor(bfloat16)``, and every fp32 output is
  bound to that same variable (so ``Cast``, ``ConstantOfShape`` and friends stay as they are).
* Its fp32 initializers and constants are stored in bf16 (rounded to nearest even); an
  initializer that fp32 nodes read too is kept and a bf16 copy added.
* Where a value crosses between a bf16 node and an fp32 one, one ``Cast`` per value and
  direction is inserted. With ``keep_io_types`` the graph's fp32 inputs and outputs stay fp32
  (a ``Cast`` after each input and before each output).
"""

from __future__ import annotations

from typing import Any

from ampkit.deploy.dependencies import require
from ampkit.deploy.dtypes import value_types

__all__ = ["convert_to_bf16"]

_FP32, _BF16 = 1, 16


def _schema(onnx: Any, node: Any, opset: int) -> Any:
    if node.domain not in ("", "ai.onnx"):
        return None
    try:
        return onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


def _type_var(params: Any, index: int) -> str:
    if not params:
        return ""
    return params[min(index, len(params) - 1)].type_str


def _computes_in_bf16(onnx: Any, node: Any, opset: int, types: dict[str, int]) -> bool:
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return False
    schema = _schema(onnx, node, opset)
    if schema is None:
        return False
    inputs = {
        _type_var(schema.inputs, i) for i, n in enumerate(node.input) if types.get(n) == _FP32
    }
    outputs = {
        _type_var(schema.outputs, i) for i, n in enumerate(node.output) if types.get(n) == _FP32
    }
    if len(inputs) != 1 or not outputs <= inputs:
        return False
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    return "tensor(bfloat16)" in allowed.get(next(iter(inputs)), set())


def convert_to_bf16(
    model: Any, fp32_nodes: set[str], keep_io_types: bool = True
) -> tuple[Any, dict[str, str]]:
    """A copy of the fp32 ``model`` computing in bf16 except the nodes named in ``fp32_nodes``,
    and ``{node: reason}`` for the other nodes that had to stay fp32 (an op whose schema at the
    graph's opset has no bfloat16, e.g. ``Conv`` before opset 22).

    Raises:
        MissingDependencyError: onnx is not installed.
    """
    onnx = require("onnx")
    from onnx import helper, numpy_helper

    ml_dtypes = require("ml_dtypes")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    types = value_types(model)
    low = {
        node.name
        for node in graph.node
        if node.name not in fp32_nodes and _computes_in_bf16(onnx, node, opset, types)
    }
    stayed = {
        node.name: f"no-bf16:{node.op_type} (opset {opset})"
        for node in graph.node
        if node.name not in fp32_nodes
        and node.name not in low
        and any(types.get(n) == _FP32 for n in [*node.input, *node.output])
        and node.op_type not in ("Cast", "Constant", "Shape")
    }
    dtype: dict[str, int] = dict(types)  # dtype of each value after the pass
    for node in graph.node:
        if node.name in low:
            for out in node.output:
                if types.get(out) == _FP32:
                    dtype[out] = _BF16
    if not keep_io_types:
        for value in graph.input:
            if value.type.tensor_type.elem_type == _FP32:
                value.type.tensor_type.elem_type = _BF16
                dtype[value.name] = _BF16

    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def wants(node: Any, name: str) -> int | None:
        """The dtype ``node`` needs for its float input ``name`` (None: leave it)."""
        if types.get(name) != _FP32:
            return None
        return _BF16 if node.name in low else _FP32

    def to_bf16(tensor: Any, name: str) -> Any:
        array = numpy_helper.to_array(tensor).astype(ml_dtypes.bfloat16)
        return numpy_helper.from_array(array, name)

    initializers, copies = [], set()
    for tensor in graph.initializer:
        needs = {wants(n, tensor.name) for n in consumers.get(tensor.name, [])} - {None}
        if needs == {_BF16}:
            initializers.append(to_bf16(tensor, tensor.name))
            dtype[tensor.name] = _BF16
            continue
        initializers.append(tensor)
        if _BF16 in needs:
            initializers.append(to_bf16(tensor, f"{tensor.name}_bf16"))
            copies.add(tensor.name)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            out = node.output[0]
            needs = {wants(n, out) for n in consumers.get(out, [])} - {None}
            value = next((a for a in node.attribute if a.name == "value"), None)
            if needs == {_BF16} and value is not None and value.t.data_type == _FP32:
                value.t.CopyFrom(to_bf16(value.t, value.t.name))
                dtype[out] = _BF16

    renamed: dict[str, str] = {}
    if keep_io_types:  # a bf16 graph output gets an internal name and a Cast back to fp32
        for value in graph.output:
            if dtype.get(value.name) == _BF16:
                renamed[value.name] = f"{value.name}_bf16"
    else:
        for value in graph.output:
            if dtype.get(value.name) == _BF16:
                value.type.tensor_type.elem_type = _BF16

    nodes: list[Any] = []
    casts: dict[tuple[str, int], str] = {}

    def cast(name: str, to: int) -> str:
        key = (name, to)
        if key not in casts:
            suffix = "bf16" if to == _BF16 else "fp32"
            casts[key] = f"{name}_to_{suffix}"
            nodes.append(
                helper.make_node(
                    "Cast", [renamed.get(name, name)], [casts[key]], f"{name}_cast_{suffix}", to=to
                )
            )
        return casts[key]

    for node in graph.node:
        for i, name in enumerate(node.input):
            need = wants(node, name)
            if need is None:
                continue
            have = dtype.get(name, _FP32)
            if name in copies and need == _BF16:
                node.input[i] = f"{name}_bf16"
            elif have != need:
                node.input[i] = cast(name, need)
            else:
                node.input[i] = renamed.get(name, name)
        for i, name in enumerate(node.output):
            node.output[i] = renamed.get(name, name)
        nodes.append(node)
    for original, internal in renamed.items():
        nodes.append(
            helper.make_node(  # not ``{name}_cast_fp32``: an fp32 reader's cast has that name
                "Cast", [internal], [original], f"{original}_output_cast_fp32", to=_FP32
            )
        )
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]  # stale types; runtimes and onnx.shape_inference re-derive them
    return model, stayed

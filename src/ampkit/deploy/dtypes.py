"""dtype consistency of an ONNX graph, checked before any runtime sees it.

ONNX ops bind their inputs to type variables (``Add(A: T, B: T) -> T``); a graph where one
``Add`` gets fp16 and fp32 is invalid, and ONNX Runtime or TensorRT refuse to load it, often
with a message that names neither the node nor the dtypes. :func:`check_dtypes` finds every such
node: for ops with a known schema it compares the inputs bound to each type variable; for ops
without one (custom domains) it requires all floating-point inputs to share one dtype.

The dtypes compared are the ones the graph *computes*: derived from the producers (graph
inputs, initializers, constants, each node's attributes such as ``Cast(to=...)``), not read
from the graph's declared ``value_info``. A converter that relabels a value fp16 while its
producer still makes fp32 (``Cast(to=FLOAT)`` of a mask whose output was declared fp16) leaves
a graph whose declarations look consistent and whose computation is not; ONNX Runtime then
refuses it ("Type (tensor(float16)) of output arg ... does not match expected type
(tensor(float))"). Such a node is a problem of its own: its declared output type disagrees
with what it produces. Every problem names the module of the PyTorch model the node came
from (:mod:`~ampkit.deploy.scopes`), which is what ``keep_fp32`` takes.
:func:`validate_dtypes` raises on the first problems, naming the nodes and modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ampkit.deploy.dependencies import require
from ampkit.deploy.scopes import module_of
from ampkit.errors import ExportError

__all__ = ["DtypeProblem", "check_dtypes", "dtype_name", "validate_dtypes", "value_types"]

_FLOATS = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}


def dtype_name(elem_type: int) -> str:
    """``1 -> 'float32'``, ``10 -> 'float16'``, ... (ONNX ``TensorProto`` element types)."""
    if elem_type in _FLOATS:
        return _FLOATS[elem_type]
    onnx = require("onnx")
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "unknown"


@dataclass(frozen=True)
class DtypeProblem:
    """A node whose inputs disagree in dtype, or whose output is declared in another dtype
    than the node produces.

    Attributes:
        node: the node's name.
        op_type: its op, with the domain for custom ops (``com.example.MyOp``).
        inputs: ``(input name, dtype)`` of the inputs that disagree (empty for an output
            problem).
        module: the module of the PyTorch model the node came from, relative to the model
            (``backbone.layers.0.mixer``; ``''`` when the graph does not say).
        outputs: ``(output name, produced dtype, declared dtype)`` of outputs declared in
            another dtype than the node makes.
    """

    node: str
    op_type: str
    inputs: tuple[tuple[str, str], ...]
    module: str = ""
    outputs: tuple[tuple[str, str, str], ...] = ()

    def __str__(self) -> str:
        seen = [f"{name} is {dtype}" for name, dtype in self.inputs]
        seen += [f"output {name} is {made} but declared {declared}"
                 for name, made, declared in self.outputs]  # fmt: skip
        where = f" in module {self.module!r}" if self.module else ""
        return f"node {self.node!r} ({self.op_type}){where}: {', '.join(seen)}"


def _without_declarations(model: Any) -> Any:
    """A copy of ``model`` without ``value_info`` and with graph outputs of unknown dtype."""
    onnx = require("onnx")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.value_info[:]
    for output in copy.graph.output:
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.elem_type = 0
    return copy


def declared_types(model: Any) -> dict[str, int]:
    """Element type of every value the graph declares (``value_info`` and graph outputs)."""
    return {
        info.name: info.type.tensor_type.elem_type
        for info in [*model.graph.value_info, *model.graph.output]
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type
    }


def value_types(model: Any, trust_declared: bool = True) -> dict[str, int]:
    """Element type of every value in the main graph: inputs, initializers, constants and
    what ONNX type inference derives for the rest (non-strict, so a broken node leaves its
    outputs unknown instead of raising).

    Args:
        trust_declared: start inference from the graph's declared ``value_info`` and output
            types (they win where they disagree with a producer). False derives every value
            from its producer alone: the dtypes the graph computes.
    """
    onnx = require("onnx")
    source = model if trust_declared else _without_declarations(model)
    inferred = onnx.shape_inference.infer_shapes(source, strict_mode=False)
    graph = inferred.graph
    types: dict[str, int] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    for tensor in graph.initializer:
        types[tensor.name] = tensor.data_type
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    types[node.output[0]] = attr.t.data_type
    return types


def _opset(model: Any, domain: str) -> int:
    for entry in model.opset_import:
        if entry.domain == domain or (
            domain in ("", "ai.onnx") and entry.domain in ("", "ai.onnx")
        ):
            return entry.version
    return 1


def _bindings(schema: Any, count: int) -> list[str]:
    """The type variable (or fixed type) of each of ``count`` actual inputs."""
    variadic_option = schema.FormalParameterOption.Variadic
    formal = list(schema.inputs)
    bound = []
    for i in range(count):
        param = formal[min(i, len(formal) - 1)] if formal else None
        if param is None:
            bound.append("")
            continue
        variadic = param.option == variadic_option
        if i >= len(formal) and not (variadic and param.is_homogeneous):
            bound.append(f"#{i}")  # heterogeneous variadic: each its own type
        else:
            bound.append(param.type_str)
    return bound


def check_dtypes(model: Any) -> list[DtypeProblem]:
    """Every node of the main graph whose inputs disagree in dtype, or whose declared output
    dtype is not the one it produces; empty when consistent. Dtypes are derived from the
    producers (see the module docstring).

    Raises:
        MissingDependencyError: onnx is not installed.
    """
    onnx = require("onnx")
    types = value_types(model, trust_declared=False)
    declared = declared_types(model)
    problems = []
    for index, node in enumerate(model.graph.node):
        name = node.name or f"#{index} {node.op_type}"
        known = [(i, n, types[n]) for i, n in enumerate(node.input) if n and n in types]
        try:
            schema = onnx.defs.get_schema(
                node.op_type, _opset(model, node.domain), node.domain or ""
            )
        except onnx.defs.SchemaError:
            schema = None
        groups: dict[str, list[tuple[str, int]]] = {}
        if schema is None:
            for _, value, elem in known:
                if elem in _FLOATS:
                    groups.setdefault("float", []).append((value, elem))
        else:
            bound = _bindings(schema, len(node.input))
            for i, value, elem in known:
                groups.setdefault(bound[i], []).append((value, elem))
        op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
        for members in groups.values():
            if len({elem for _, elem in members}) > 1:
                problems.append(
                    DtypeProblem(
                        node=name,
                        op_type=op,
                        inputs=tuple((value, dtype_name(elem)) for value, elem in members),
                        module=module_of(model, node.name),
                    )
                )
        mislabelled = tuple(
            (out, dtype_name(types[out]), dtype_name(declared[out]))
            for out in node.output
            if out in types and out in declared and types[out] != declared[out]
        )
        if mislabelled and not (problems and problems[-1].node == name):  # a mix: said above
            problems.append(
                DtypeProblem(
                    node=name, op_type=op, inputs=(), module=module_of(model, node.name),
                    outputs=mislabelled,
                )
            )  # fmt: skip
    return problems


def validate_dtypes(model: Any) -> None:
    """Raise if any node's inputs disagree in dtype.

    Raises:
        ExportError: names up to three offending nodes, their inputs and dtypes, and the
            modules they came from as a ``keep_fp32`` list.
    """
    problems = check_dtypes(model)
    if problems:
        shown = "; ".join(str(p) for p in problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        modules = list(dict.fromkeys(p.module for p in problems if p.module))
        fix = (
            f"Keep their modules in fp32 (keep_fp32={modules!r})"
            if modules
            else "Keep the op's module in fp32 (keep_fp32=[...])"
        )
        raise ExportError(
            f"export: {len(problems)} node(s) mix dtypes, which ONNX Runtime and TensorRT "
            f"refuse: {shown}{more}. Every input bound to one type must share one dtype, and "
            f"a node must produce the dtype its output is declared in. {fix}, or export in "
            "fp32."
        )

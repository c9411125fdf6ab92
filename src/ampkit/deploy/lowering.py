"""The low-precision graph: which ONNX nodes stay fp32, and the conversion itself.

A node stays fp32 for one of three reasons, recorded per node in :attr:`Lowering.fp32_nodes`:

* ``op``: its op is on :data:`FP32_OPS`, the ops that overflow or lose too much in fp16:
  normalisations (their variance sums squares), softmax, reductions, ``Pow``, ``Sqrt``,
  ``Exp``, ``Log``, the losses, and the ops with no fp16 kernels that the converter's own
  default list names (``Resize``, ``Range``, ``TopK``, ...).
* ``module``: it belongs to a module named in ``keep_fp32`` (the doctor's findings, or the
  user's list): the exporter records each node's module path, so the mapping is exact.
* ``propagated``: an elementwise op whose floating inputs all come from fp32 nodes or
  constants (``ReduceMean -> Add(eps) -> Sqrt`` in an RMSNorm): running it in low precision
  would only add a round trip through fp16, where the overflow happens.

fp16 goes through ``onnxconverter_common.float16.convert_float_to_float16`` (maintained, and it
handles subgraphs and value infos) with the fp32 list as its node block-list and fp16's real
limits (65504 and 2**-24) instead of its defaults (1e4 and 1e-7), which would clip legitimate
weights; each constant it still clips (a ``-3.4e38`` attention mask becomes ``-65504``) is
reported. One repair follows it, our own: the converter keeps a graph output fp32 under
``keep_io_types`` even when nodes inside the graph read that value too (T5's
``encoder_last_hidden_state`` feeds every cross-attention), leaving fp16 x fp32 ``MatMul``s
that ONNX Runtime refuses; :func:`_repair_fp16_inputs` casts such inputs to fp16 and the
result says how many. bf16 goes through :mod:`ampkit.deploy.bf16_graph` (no library converts
to bf16).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ampkit.deploy.dependencies import require

__all__ = ["FP32_OPS", "Lowering", "lower", "module_of_nodes"]

#: ONNX ops kept in fp32 in every low-precision export.
FP32_OPS: frozenset[str] = frozenset(
    {
        # normalisations
        "LayerNormalization", "BatchNormalization", "InstanceNormalization",
        "GroupNormalization", "RMSNormalization", "LpNormalization", "MeanVarianceNormalization",
        "SimplifiedLayerNormalization", "SkipLayerNormalization",
        # softmax and the losses
        "Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
        # reductions
        "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp", "ReduceProd", "CumSum",
        # pow / sqrt / exp
        "Pow", "Sqrt", "Exp", "Log", "Reciprocal",
        # no fp16 kernels, or non-float semantics (onnxconverter-common's default list)
        "Resize", "Upsample", "Range", "TopK", "NonMaxSuppression", "RoiAlign",
        "RandomUniformLike", "Min", "Max",
    }
)  # fmt: skip

_ELEMENTWISE = frozenset(
    {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Clip", "Where", "Cast", "Identity", "Expand"}
)
_CLIPPED = re.compile(r"float32 number (\S+) will be truncated to (\S+)")


@dataclass(frozen=True)
class Lowering:
    """The low-precision graph and what stayed fp32.

    Attributes:
        model: the converted ``onnx.ModelProto``.
        fp32_nodes: ``{node name: reason}`` (``op:Softmax``, ``module:blocks.0.mlp``,
            ``propagated``, and for bf16 ``no-bf16:Conv (opset 18)``: the op's schema has no
            bfloat16 at the graph's opset) for every node kept in fp32.
        clipped: one line per constant the conversion clipped to the format's range.
        missing_modules: ``keep_fp32`` names that matched no node of the graph.
        fp32_size: serialized size of the fp32 graph (same metadata), for the size ratio.
        repaired: node inputs the fp16 converter left fp32 and this module cast to fp16.
    """

    model: Any
    fp32_nodes: dict[str, str]
    clipped: tuple[str, ...]
    missing_modules: tuple[str, ...]
    fp32_size: int
    repaired: int = 0


def module_of_nodes(model: Any, wrapper: str = "model") -> dict[str, tuple[str, ...]]:
    """``{node name: module paths}`` from the exporter's ``pkg.torch.onnx.name_scopes``.

    Paths are relative to the exported model (the ``wrapper.`` prefix is removed); a node
    outside any submodule maps to ``()``.
    """
    found: dict[str, tuple[str, ...]] = {}
    prefix = f"{wrapper}."
    for node in model.graph.node:
        scopes: list[str] = []
        for prop in node.metadata_props:
            if prop.key == "pkg.torch.onnx.name_scopes":
                try:
                    scopes = list(ast.literal_eval(prop.value))
                except (ValueError, SyntaxError):
                    scopes = []
        found[node.name] = tuple(s[len(prefix) :] for s in scopes if s.startswith(prefix))
    return found


#: Debugging metadata the exporter attaches to every node (stack traces, FX nodes): a quarter
#: of a small model's file. ``pkg.torch.onnx.name_scopes`` (the module path) is kept.
_DEBUG_METADATA = frozenset(
    {"pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node", "pkg.torch.onnx.class_hierarchy",
     "namespace"}
)  # fmt: skip


def _strip_debug_metadata(model: Any) -> None:
    for node in model.graph.node:
        kept = [p for p in node.metadata_props if p.key not in _DEBUG_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)


def _name_nodes(model: Any) -> None:
    seen: set[str] = set()
    for index, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{index}"
        seen.add(node.name)


def plan_fp32_nodes(model: Any, keep_fp32: Sequence[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The nodes to keep in fp32 and why, and the ``keep_fp32`` names that matched nothing."""
    scopes = module_of_nodes(model)
    plan: dict[str, str] = {}
    matched: set[str] = set()
    for node in model.graph.node:
        if node.op_type in FP32_OPS and node.domain in ("", "ai.onnx"):
            plan[node.name] = f"op:{node.op_type}"
            continue
        for module in keep_fp32:
            if any(s == module or s.startswith(f"{module}.") for s in scopes[node.name]):
                plan[node.name] = f"module:{module}"
                matched.add(module)
                break
    constants = {t.name for t in model.graph.initializer}
    constants |= {n.output[0] for n in model.graph.node if n.op_type == "Constant"}
    fp32_values = {out for n in model.graph.node if n.name in plan for out in n.output}
    for node in model.graph.node:  # topological order: one pass propagates along chains
        if node.name in plan or node.op_type not in _ELEMENTWISE:
            continue
        sources = [n for n in node.input if n]
        if any(n in fp32_values for n in sources) and all(
            n in fp32_values or n in constants for n in sources
        ):
            plan[node.name] = "propagated"
            fp32_values.update(node.output)
    missing = tuple(m for m in keep_fp32 if m not in matched)
    return plan, missing


def _fp16(model: Any, fp32_nodes: set[str], keep_io_types: bool) -> tuple[Any, tuple[str, ...]]:
    float16 = require("onnxconverter_common").float16
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        converted = float16.convert_float_to_float16(
            model,
            min_positive_val=2.0**-24,
            max_finite_val=65504.0,
            keep_io_types=keep_io_types,
            op_block_list=sorted(FP32_OPS),
            node_block_list=sorted(fp32_nodes),
        )
    clipped = []
    for warning in caught:
        match = _CLIPPED.search(str(warning.message))
        if match:
            clipped.append(f"{float(match.group(1)):.4g} -> {float(match.group(2)):.4g}")
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return converted, tuple(dict.fromkeys(clipped))


def _repair_fp16_inputs(model: Any, fp32_nodes: set[str]) -> int:
    """Cast the fp32 inputs of fp16 nodes that :func:`check_dtypes` finds mixed; returns how many."""
    from onnx import TensorProto, helper

    from ampkit.deploy.dtypes import check_dtypes

    problems = [p for p in check_dtypes(model) if p.node not in fp32_nodes]
    fixes = {
        (p.node, name)
        for p in problems
        if {d for _, d in p.inputs} == {"float16", "float32"}
        for name, dtype in p.inputs
        if dtype == "float32"
    }
    nodes, casts = [], {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if (node.name, name) in fixes:
                if name not in casts:
                    casts[name] = f"{name}_repaired_fp16"
                    nodes.append(
                        helper.make_node(
                            "Cast", [name], [casts[name]], f"{name}_repair_cast",
                            to=TensorProto.FLOAT16,
                        )
                    )  # fmt: skip
                node.input[i] = casts[name]
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return len(fixes)


def _restore_output_types(model: Any, original: dict[str, int]) -> int:
    """Give every graph output its original (fp32) type back; returns how many were fixed.

    The fp16 converter, under ``keep_io_types``, still casts the output of a block-listed
    *last* node (a head kept in fp32) down to fp16 and declares the graph output fp16. Where
    that down-cast only feeds the output, it becomes a cast to the original type (the fp32
    island stays fp32 to the end); otherwise a cast back is appended for the graph output.
    """
    from onnx import helper

    fixed = 0
    graph_outputs = {o.name: o for o in model.graph.output}
    consumers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    producers = {out: node for node in model.graph.node for out in node.output}
    for name, value in graph_outputs.items():
        want = original.get(name)
        tensor_type = value.type.tensor_type
        if want is None or tensor_type.elem_type == want:
            continue
        producer = producers.get(name)
        if producer is not None and producer.op_type == "Cast" and not consumers.get(name):
            for attribute in producer.attribute:
                if attribute.name == "to":
                    attribute.i = want
        else:
            lowp = f"{name}_lowp"
            for node in model.graph.node:
                node.output[:] = [lowp if o == name else o for o in node.output]
                node.input[:] = [lowp if i == name else i for i in node.input]
            model.graph.node.append(
                helper.make_node("Cast", [lowp], [name], f"{name}_restore_cast", to=want)
            )
        tensor_type.elem_type = want
        fixed += 1
    return fixed


def lower(
    model: Any, precision: str, keep_fp32: Sequence[str] = (), keep_io_types: bool = True
) -> Lowering:
    """Convert the fp32 ONNX ``model`` to ``precision`` (``fp16``/``bf16``; ``fp32`` returns it
    unchanged) with the fp32 block-list described in this module.

    Raises:
        MissingDependencyError: onnx (or onnxconverter-common, for fp16) is not installed.
    """
    onnx = require("onnx")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    _name_nodes(model)
    _strip_debug_metadata(model)
    size = model.ByteSize()
    if precision == "fp32":
        return Lowering(model=model, fp32_nodes={}, clipped=(), missing_modules=(), fp32_size=size)
    plan, missing = plan_fp32_nodes(model, keep_fp32)
    output_types = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    if precision == "fp16":
        converted, clipped = _fp16(model, set(plan), keep_io_types)
        repaired = _repair_fp16_inputs(converted, set(plan))
        if keep_io_types:
            repaired += _restore_output_types(converted, output_types)
    else:
        from ampkit.deploy.bf16_graph import convert_to_bf16

        converted, stayed = convert_to_bf16(model, set(plan), keep_io_types)
        plan, clipped, repaired = {**plan, **stayed}, (), 0
    return Lowering(
        model=converted,
        fp32_nodes=plan,
        clipped=clipped,
        missing_modules=missing,
        fp32_size=size,
        repaired=repaired,
    )

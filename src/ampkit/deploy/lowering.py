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
weights. Before it, :func:`saturate_constants` brings the constants beyond the format's range
(attention-mask fills, ``torch.finfo(torch.float32).min``) to half its largest value, so that
masked rows stay finite; each constant the converter still clips is reported. Two repairs
follow it, our own: :func:`_reconcile_fp16_types` makes every node produce the dtype the
converter declared for its outputs (it relabels ``Cast(to=FLOAT)`` outputs fp16 without
changing ``to``); and the converter keeps a graph output fp32 under ``keep_io_types`` even
when nodes inside the graph read that value too (T5's ``encoder_last_hidden_state`` feeds
every cross-attention), leaving fp16 x fp32 ``MatMul``s that ONNX Runtime refuses, so
:func:`_repair_fp16_inputs` casts such inputs to fp16. The result says how many of each.
bf16 gets the same constants treatment. bf16 goes through :mod:`ampkit.deploy.bf16_graph` (no library converts
to bf16).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ampkit.deploy.dependencies import require
from ampkit.deploy.scopes import module_of_nodes, modules_matching

__all__ = [
    "FP32_OPS",
    "Lowering",
    "lower",
    "module_of_nodes",
    "plan_fp32_nodes",
    "saturate_constants",
]

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
        saturated: one line per out-of-range constant (a mask fill) brought to half the
            format's largest value (:func:`saturate_constants`).
        relabelled: node outputs made to produce the dtype the fp16 converter declared
            (:func:`_reconcile_fp16_types`).
    """

    model: Any
    fp32_nodes: dict[str, str]
    clipped: tuple[str, ...]
    missing_modules: tuple[str, ...]
    fp32_size: int
    repaired: int = 0
    saturated: tuple[str, ...] = ()
    relabelled: int = 0


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
    """The nodes to keep in fp32 and why, and the ``keep_fp32`` names that matched nothing.

    A module name matches the nodes whose name scope is the module or one inside it, and the
    nodes that read its parameters (initializers named ``model.<module>.<parameter>``: a
    module whose scope the exporter lost, or whose ops the optimiser merged into a neighbour,
    still owns the node that uses its weights).
    """
    scopes = module_of_nodes(model)
    plan: dict[str, str] = {}
    matched: set[str] = set()
    initializers = {t.name for t in model.graph.initializer}

    def owner(node: Any) -> str | None:
        for module in keep_fp32:
            if modules_matching(scopes[node.name], module):
                return module
        for module in keep_fp32:
            prefix = f"model.{module}."
            if any(n in initializers and n.startswith(prefix) for n in node.input):
                return module
        return None

    for node in model.graph.node:
        module = owner(node) if keep_fp32 else None
        if module is not None:
            matched.add(module)
        if node.op_type in FP32_OPS and node.domain in ("", "ai.onnx"):
            plan[node.name] = f"op:{node.op_type}"
        elif module is not None:
            plan[node.name] = f"module:{module}"
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
    missing = tuple(m for m in dict.fromkeys(keep_fp32) if m not in matched)
    return plan, missing


#: The largest finite value of each low-precision format.
_LARGEST = {"fp16": 65504.0, "bf16": 3.3895313892515355e38}


def saturate_constants(model: Any, precision: str, fp32_nodes: set[str]) -> tuple[str, ...]:
    """Bring fp32 constants beyond ``precision``'s range to half its largest finite value, in
    place; one line per distinct value changed.

    Such constants are the fills of additive attention masks (``torch.finfo(torch.float32).min``
    where a position is masked). In fp16 that value does not exist; in bf16 it rounds to
    ``-inf`` (fp32's largest is above bf16's). ``-inf`` added to a masked score, or two fills
    added together (a causal and a padding mask), make ``-inf`` everywhere in a fully masked
    row (a left-padded sequence in a causal model), and softmax of such a row is NaN: 0 * NaN
    then carries it to every position that reads the row. Half the largest finite value keeps
    a fill plus a fill, or a fill plus an activation, finite, and ``exp`` of it is still 0.
    Only constants that a low-precision node reads are changed; ``inf`` itself is left (it
    exists in both formats and is what the model wrote).
    """
    onnx = require("onnx")
    import numpy as np
    from onnx import numpy_helper

    largest = _LARGEST[precision]
    low_readers = {name for n in model.graph.node if n.name not in fp32_nodes for name in n.input}
    changed: dict[str, None] = {}

    def saturated(tensor: Any) -> Any | None:
        if tensor.data_type != onnx.TensorProto.FLOAT:
            return None
        array = numpy_helper.to_array(tensor)
        beyond = np.isfinite(array) & (np.abs(array) > largest)
        if not beyond.any():
            return None
        for value in np.unique(array[beyond])[:4]:
            changed[f"{float(value):.4g} -> {float(np.sign(value) * largest / 2):.4g}"] = None
        fixed = np.where(beyond, np.sign(array) * np.float32(largest / 2), array)
        return numpy_helper.from_array(fixed.astype(np.float32), tensor.name)

    for tensor in model.graph.initializer:
        if tensor.name in low_readers:
            new = saturated(tensor)
            if new is not None:
                tensor.CopyFrom(new)
    for node in model.graph.node:
        if node.name in fp32_nodes:
            continue
        if node.op_type == "Constant" and not any(out in low_readers for out in node.output):
            continue
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                new = saturated(attribute.t)
                if new is not None:
                    attribute.t.CopyFrom(new)
    return tuple(changed)


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


def _reconcile_fp16_types(model: Any) -> int:
    """Make every node produce the dtype the fp16 converter declared for its outputs; returns
    how many outputs were fixed.

    The converter relabels every fp32 ``value_info`` of a converted node fp16 but leaves the
    attributes that fix an output's dtype alone: ``Cast(to=FLOAT)`` (an integer attention mask
    turned into a float to multiply with, in Mamba, DeBERTa) stays a cast to fp32 whose output
    is declared fp16, and a node reading a graph output that stays fp32 (CLIP's
    ``Gather`` of ``last_hidden_state`` for the pooled output) makes fp32 where fp16 is
    declared. ONNX Runtime refuses both ("Type (tensor(float16)) of output arg ... does not
    match expected type (tensor(float))"). A ``Cast`` is re-targeted to the declared dtype;
    any other node gets a ``Cast`` after it. Repeated until the declarations hold (a fix
    upstream changes what inference derives downstream).
    """
    from onnx import TensorProto, helper

    from ampkit.deploy.dtypes import declared_types, value_types

    floats = {TensorProto.FLOAT, TensorProto.FLOAT16}
    fixed = 0
    for _ in range(len(model.graph.node) + 1):
        produced = value_types(model, trust_declared=False)
        declared = declared_types(model)
        wrong = {
            out
            for node in model.graph.node
            for out in node.output
            if produced.get(out) != declared.get(out)
            and {produced.get(out), declared.get(out)} <= floats
        }
        nodes, changed = [], False
        for node in model.graph.node:
            nodes.append(node)
            if any(name in wrong for name in node.input):
                continue  # fed by a value fixed this round: inference decides it next round
            for i, out in enumerate(node.output):
                want = declared.get(out)
                if out not in wrong or want is None:
                    continue
                changed, fixed = True, fixed + 1
                if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
                    for attribute in node.attribute:
                        if attribute.name == "to":
                            attribute.i = want
                    continue
                internal = f"{out}_as_produced"
                node.output[i] = internal
                nodes.append(
                    helper.make_node("Cast", [internal], [out], f"{out}_to_declared", to=want)
                )
        if not changed:
            break
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return fixed


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
    saturated = saturate_constants(model, precision, set(plan))
    if precision == "fp16":
        converted, clipped = _fp16(model, set(plan), keep_io_types)
        relabelled = _reconcile_fp16_types(converted)
        repaired = _repair_fp16_inputs(converted, set(plan))
        if keep_io_types:
            repaired += _restore_output_types(converted, output_types)
    else:
        from ampkit.deploy.bf16_graph import convert_to_bf16

        converted, stayed = convert_to_bf16(model, set(plan), keep_io_types)
        plan, clipped, repaired, relabelled = {**plan, **stayed}, (), 0, 0
    return Lowering(
        model=converted,
        fp32_nodes=plan,
        clipped=clipped,
        missing_modules=missing,
        fp32_size=size,
        repaired=repaired,
        saturated=saturated,
        relabelled=relabelled,
    )

"""Running an exported model the way a server would: ONNX Runtime on the CPU, or
``torch.export.load`` for the torch-export format.

ONNX Runtime's CPU provider has no bfloat16 kernels for ``MatMul``/``Gemm``. A bf16 graph that
it refuses is run by ``onnx.reference.ReferenceEvaluator`` (numpy and ``ml_dtypes``, slow but
exact to the ONNX spec) and the report says so; any other refusal is an error naming the node.

ONNX Runtime's CPU provider also runs fp16 nodes that lack CPU kernels in fp32 (it inserts
casts, then removes the pairs that cancel), so an fp16 overflow inside the graph does not show
on it. :func:`run_reference` computes every node in its declared dtype; the exporter runs it on
the first parity batch of every fp16 graph, as a second table.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ampkit.deploy.dependencies import require
from ampkit.errors import ExportError

__all__ = ["run_onnx", "run_program", "run_reference"]

_NODE = re.compile(r"node with name '([^']*)'")


def _feeds(session_inputs: Sequence[str], names: Sequence[str], batch: Sequence[torch.Tensor]):
    values = dict(zip(names, (t.numpy() for t in batch), strict=True))
    return {name: values[name] for name in session_inputs if name in values}


def _module_of_node(model_bytes: bytes, node: str) -> str:
    """The module the node ``node`` came from (``''`` when the graph does not say)."""
    from ampkit.deploy.scopes import module_of

    onnx = require("onnx")
    try:
        return module_of(onnx.load_from_string(model_bytes), node)
    except Exception:  # a graph the runtime refused may not even parse; the node name stays
        return ""


def run_onnx(
    model_bytes: bytes,
    input_names: Sequence[str],
    batches: Sequence[Sequence[torch.Tensor]],
    allow_reference: bool = False,
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[list[list[np.ndarray]], str, list[str]]:
    """Run the serialized ONNX model on every batch: ``(outputs per batch, runtime, notes)``.

    Args:
        allow_reference: fall back to the ONNX reference evaluator when ONNX Runtime's CPU
            provider has no kernel for a node (used for bf16 graphs).
        progress: called as ``progress("parity batches", done, total)`` after each batch.

    Raises:
        MissingDependencyError: onnxruntime is not installed.
        ExportError: ONNX Runtime refused the graph (the message names the node).
    """
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            model_bytes, sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own Fail/NotImplemented/InvalidGraph
        text = str(exc)
        node = _NODE.search(text)
        if allow_reference and "NOT_IMPLEMENTED" in text:
            outputs, runtime, _ = run_reference(model_bytes, input_names, batches)
            why = (
                f"onnxruntime {ort.__version__} (CPU) has no kernel for node "
                f"{node.group(1) if node else '?'} in this dtype, so the parity check ran in "
                "the ONNX reference evaluator; serve it on a runtime with bf16 kernels "
                "(onnxruntime CUDA, TensorRT)"
            )
            return outputs, runtime, [why]
        where = f" at node {node.group(1)!r}" if node else ""
        module = _module_of_node(model_bytes, node.group(1)) if node else ""
        fix = (
            f"Keep its module in fp32 (keep_fp32=[{module!r}])"
            if module
            else "Keep the module of that op in fp32 (keep_fp32=[...])"
        )
        where += f" (module {module!r})" if module else ""
        raise ExportError(
            f"export: onnxruntime refused the exported graph{where}: {text.splitlines()[0]}. "
            f"{fix} or export in fp32."
        ) from exc
    names = [i.name for i in session.get_inputs()]
    outputs = []
    for batch in batches:
        outputs.append(list(session.run(None, _feeds(names, input_names, batch))))
        if progress is not None:
            progress("parity batches", len(outputs), len(batches))
    return outputs, f"onnxruntime {ort.__version__} (CPU)", []


def run_reference(
    model_bytes: bytes, input_names: Sequence[str], batches: Sequence[Sequence[torch.Tensor]]
) -> tuple[list[list[np.ndarray]], str, list[str]]:
    """Run the serialized ONNX model in ``onnx.reference.ReferenceEvaluator``: every node in
    its declared dtype (numpy; ``ml_dtypes`` for bf16), overflow included.

    Raises:
        MissingDependencyError: onnx is not installed.
        ExportError: the reference evaluator cannot run the graph (its own limits: an op it
            does not implement for these shapes or dtypes).
    """
    onnx = require("onnx")
    model = onnx.load_from_string(model_bytes)
    names = [i.name for i in model.graph.input]
    try:
        reference = onnx.reference.ReferenceEvaluator(model)
        with np.errstate(all="ignore"):  # overflow is what this run looks for; it is counted
            outputs = [list(reference.run(None, _feeds(names, input_names, b))) for b in batches]
    except Exception as exc:  # the evaluator's numpy kernels raise ValueError, TypeError, ...
        raise ExportError(
            f"export: the ONNX reference evaluator (onnx {onnx.__version__}) could not run the "
            f"graph ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else exc})."
        ) from exc
    return outputs, f"onnx.reference (onnx {onnx.__version__})", []


def run_program(
    program_bytes: bytes,
    batches: Sequence[Sequence[torch.Tensor]],
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[list[list[np.ndarray]], str, list[str]]:
    """Reload a saved ``ExportedProgram`` and run it on every batch (``progress("parity
    batches", done, total)`` after each).

    Raises:
        ExportError: the saved program cannot be loaded back.
    """
    try:
        program = torch.export.load(io.BytesIO(program_bytes))
    except Exception as exc:  # torch raises several serialization errors
        raise ExportError(
            f"export: the saved ExportedProgram cannot be loaded back ({exc}). Report this "
            "with the model; meanwhile export format='onnx'."
        ) from exc
    module = program.module()
    outputs: list[list[np.ndarray]] = []
    with torch.no_grad():
        for batch in batches:
            result = module(*batch)
            result = result if isinstance(result, (tuple, list)) else (result,)
            outputs.append([t.detach().float().numpy() if t.is_floating_point() else t.numpy()
                            for t in result])  # fmt: skip
            if progress is not None:
                progress("parity batches", len(outputs), len(batches))
    return outputs, f"torch.export.load (torch {torch.__version__})", []

"""From an ``nn.Module`` to a graph: ``torch.export`` first, then torch's ONNX exporter.

Both output formats start from :func:`capture`, which runs ``torch.export.export`` itself
rather than letting ``torch.onnx.export`` do it: given ``dynamic_shapes``, the ONNX exporter
relaxes a dimension the model specialises (``x.view(2, -1)`` under a dynamic batch) into a
graph that is silently wrong for other sizes, whereas ``torch.export`` refuses it and names the
dimension. :func:`to_onnx` then translates the program with ``torch.onnx.export(...,
dynamo=True)`` (onnxscript) and turns its failures into one line naming the op.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ampkit._logging import quiet_loggers
from ampkit.deploy.dependencies import require
from ampkit.errors import ExportError

__all__ = ["capture", "to_onnx"]

_CONSTRAINT = re.compile(r"Constraints violated \(([^)]*)\)")
_SPECIALISED = re.compile(r"specialized it to be a constant \((\d+)\)")
_OP = re.compile(r"op='([^']+)'")
_NODE = re.compile(r"%(\w+)")


def _first_line(exc: BaseException) -> str:
    """The line that says what went wrong (torch.onnx puts it under "Exception summary")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if "## Exception summary" in lines:
        after = lines[lines.index("## Exception summary") + 1 :]
        if after:
            return after[0]
    return lines[0] if lines else type(exc).__name__


def capture(
    module: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    dynamic_shapes: Any = None,
) -> torch.export.ExportedProgram:
    """``torch.export.export(module, inputs)`` with its failures as one line each.

    ``module`` takes the flat inputs positionally (``forward(*flat)``); ``dynamic_shapes`` has
    one entry per input (``{0: torch.export.Dim("batch")}`` or None).

    Raises:
        ExportError: a dimension marked dynamic was specialised by the model (the message
            names it and the constant), or the model cannot be traced (the first line of
            torch's reason).
    """
    if dynamic_shapes is not None:  # one entry per flat input; ``forward(*flat)`` groups them
        dynamic_shapes = (tuple(dynamic_shapes),)
    try:
        return torch.export.export(module, tuple(inputs), dynamic_shapes=dynamic_shapes)
    except Exception as exc:  # torch raises UserError, GuardOnDataDependent, TypeError, ...
        text = str(exc)
        constraint = _CONSTRAINT.search(text)
        if constraint:
            constant = _SPECIALISED.search(text)
            seen = f" to the constant {constant.group(1)}" if constant else ""
            raise ExportError(
                f"export: dynamic dimension {constraint.group(1)!r} was specialised by the "
                f"model{seen} (torch.export: {_first_line(exc)}). A dynamic dimension must not "
                "be baked into the model (e.g. x.view(2, -1)). Mark it static, or make the "
                "model shape-generic (x.view(x.shape[0], -1))."
            ) from exc
        raise ExportError(
            f"export: torch.export could not trace the model: {type(exc).__name__}: "
            f"{_first_line(exc)}. Exportable models avoid data-dependent Python control flow; "
            "see the torch.export docs, or export a wrapper that fixes those inputs."
        ) from exc


def _unsupported_op(exc: BaseException) -> tuple[str, str] | None:
    """``(op, graph node)`` of the first op the ONNX exporter had no translation for."""
    seen: BaseException | None = exc
    node = ""
    while seen is not None:
        text = str(seen)
        if node == "" and "Error when translating node" in text:
            match = _NODE.search(text)
            node = match.group(1) if match else ""
        if type(seen).__name__ == "DispatchError":
            match = _OP.search(text)
            if match:
                return match.group(1), node
        seen = seen.__cause__
    return None


@contextlib.contextmanager
def _exporter_chatter_muted() -> Iterator[None]:
    """Silence the exporter's registry notes ("torchvision is not installed. Skipping ..."), its
    deprecation warnings and the numpy warnings of onnxscript's constant folding (it evaluates
    constant subgraphs with ``onnx.reference``; T5's relative-position buckets take log(0)
    there, which is masked out later) for the call; the loggers' levels are restored
    afterwards. Errors still raise."""
    with quiet_loggers("torch.onnx", "onnxscript"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"onnx\.reference")
        yield


def to_onnx(
    program: torch.export.ExportedProgram,
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> Any:
    """Translate an exported program into an fp32 ONNX ``ModelProto`` (optimised by onnxscript).

    Raises:
        MissingDependencyError: onnx or onnxscript is not installed.
        ExportError: an op has no ONNX translation (the message names the op and the graph
            node), or the translation failed otherwise (the first line of torch's reason).
    """
    require("onnx")
    require("onnxscript")
    # torch 2.5's exporter has no optimize= yet: there the program is optimised after export
    optimize_on_export = "optimize" in inspect.signature(torch.onnx.export).parameters
    extra: dict[str, Any] = {"optimize": True} if optimize_on_export else {}
    try:
        with _exporter_chatter_muted():
            onnx_program = torch.onnx.export(
                program,
                (),
                dynamo=True,
                verbose=False,
                input_names=list(input_names),
                output_names=list(output_names),
                **extra,
            )
            if onnx_program is not None and not optimize_on_export:
                onnx_program.optimize()
    except Exception as exc:  # torch.onnx.OnnxExporterError and what it wraps
        unsupported = _unsupported_op(exc)
        if unsupported:
            op, node = unsupported
            where = f" (graph node {node!r})" if node else ""
            raise ExportError(
                f"export: the op {op}{where} has no ONNX translation in torch "
                f"{torch.__version__}'s exporter. Replace it with supported ops, register one "
                "with torch.onnx.export(custom_translation_table=...), or use "
                "format='torch-export'."
            ) from exc
        raise ExportError(
            f"export: torch.onnx.export failed: {type(exc).__name__}: {_first_line(exc)}. "
            "Rerun torch.onnx.export(..., report=True) for torch's full report."
        ) from exc
    if onnx_program is None:  # only the legacy exporter (dynamo=False) returns nothing
        raise ExportError(
            f"export: torch.onnx.export(dynamo=True) of torch {torch.__version__} returned no "
            "ONNX program. Report this with the model; meanwhile use format='torch-export'."
        )
    return onnx_program.model_proto

"""``ampkit.export``: a trained fp32 model to a low-precision file, checked against itself.

::

    result = ampkit.export(model, (tokens,), "model.onnx", precision="fp16")
    print(result.to_text())      # size, what stayed fp32, the parity table

The steps, each one in its own module:

1. :mod:`~ampkit.deploy.signature`: the inputs and outputs as flat, named tensors; the fp32
   reference outputs on the example inputs and a few more parity batches.
2. :mod:`~ampkit.deploy.islands`: the modules to keep in fp32 (the doctor's, or yours).
3. :mod:`~ampkit.deploy.capture`: ``torch.export``, then (ONNX) torch's dynamo exporter.
4. :mod:`~ampkit.deploy.lowering`: the fp16/bf16 graph with its fp32 block-list;
   :mod:`~ampkit.deploy.dtypes`: every node's inputs agree in dtype.
   (torch-export: the program is captured under the precision's autocast instead.)
5. :mod:`~ampkit.deploy.runtime` and :mod:`~ampkit.deploy.parity`: the serialized bytes are run
   (ONNX Runtime CPU, or ``torch.export.load``) and compared with the fp32 reference.
6. Only if parity passes is the file written: a temporary file in the target folder, fsynced,
   renamed into place. A failed export leaves nothing at ``path``.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from ampkit._files import atomic_write
from ampkit.deploy.parity import TOLERANCES, ParityReport, Tolerance, compare
from ampkit.deploy.result import ExportResult
from ampkit.deploy.signature import (
    FlatModel,
    Signature,
    flatten_outputs,
    random_batches,
    resolve_signature,
)
from ampkit.errors import ConfigurationError, ExportError, ParityError
from ampkit.precision.policy import PRECISION_ALIASES

__all__ = ["export"]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_FORMATS = ("onnx", "torch-export")


class _Autocast(nn.Module):
    """``model`` under ``torch.autocast`` in ``dtype``; floating outputs back to fp32 when
    ``keep_io_types``."""

    def __init__(self, model: nn.Module, dtype: torch.dtype, keep_io_types: bool) -> None:
        super().__init__()
        self.model = model
        self.dtype = dtype
        self.keep_io_types = keep_io_types

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.autocast("cpu", dtype=self.dtype):
            outputs = self.model(*flat)
        if self.keep_io_types:
            return tuple(t.float() if t.is_floating_point() else t for t in outputs)
        return outputs


def _validate(model: nn.Module, precision: str, format: str, path: str | os.PathLike) -> str:
    if not isinstance(model, nn.Module):
        raise ConfigurationError(
            f"export: model is a {type(model).__name__}, not a torch.nn.Module. Pass the model."
        )
    canonical = PRECISION_ALIASES.get(str(precision).strip().lower())
    if canonical not in ("fp16", "bf16", "fp32"):  # fp8 and bf16-true are training precisions
        raise ConfigurationError(
            f"export: precision {precision!r} is not exportable. Use fp16, bf16 or fp32."
        )
    if format not in _FORMATS:
        raise ConfigurationError(
            f"export: format {format!r} is unknown. Use 'onnx' or 'torch-export'."
        )
    for name, param in [*model.named_parameters(), *model.named_buffers()]:
        if param.is_floating_point() and param.dtype != torch.float32:
            raise ConfigurationError(
                f"export: {name!r} is {param.dtype}, but export starts from the fp32 model "
                "(it is the parity reference). Pass the model in fp32; export lowers it."
            )
    if Path(path).is_dir():
        raise ConfigurationError(f"export: {path} is a folder. Pass a file path to write.")
    return canonical


def _reference(flat: FlatModel, batches: Sequence[Sequence[torch.Tensor]]):
    with torch.no_grad():
        outputs = [flat(*batch) for batch in batches]
    return [[t.float().numpy() if t.is_floating_point() else t.numpy() for t in o] for o in outputs]


def _onnx_bytes(
    flat: FlatModel,
    signature: Signature,
    output_names: Sequence[str],
    precision: str,
    keep: list[str],
    keep_io_types: bool,
    dynamic_shapes: Any,
) -> tuple[bytes, int | None, dict[str, str], list[str]]:
    from ampkit.deploy.capture import capture, to_onnx
    from ampkit.deploy.dtypes import validate_dtypes
    from ampkit.deploy.lowering import lower

    proto = to_onnx(capture(flat, signature.inputs, dynamic_shapes), signature.names, output_names)
    lowering = lower(proto, precision, keep, keep_io_types)
    validate_dtypes(lowering.model)
    notes = [f"constant clipped to the fp16 range: {c}" for c in lowering.clipped]
    if lowering.repaired:
        notes.append(
            f"cast {lowering.repaired} fp32 input(s) of fp16 nodes that the fp16 converter left "
            "fp32 (graph outputs also read inside the graph)"
        )
    if lowering.missing_modules:
        notes.append(
            f"keep_fp32 names matched no node of the graph: {', '.join(lowering.missing_modules)}"
        )
    data = lowering.model.SerializeToString()
    return data, lowering.fp32_size, lowering.fp32_nodes, notes


def export(
    model: nn.Module,
    example_inputs: Any,
    path: str | os.PathLike,
    precision: str = "fp16",
    format: Literal["onnx", "torch-export"] = "onnx",
    keep_fp32: Sequence[str] | None = None,
    *,
    keep_io_types: bool = True,
    check: bool = True,
    parity_batches: int | Sequence[Any] = 3,
    tolerance: Tolerance | None = None,
    dynamic_shapes: Any = None,
    seed: int = 0,
) -> ExportResult:
    """Export the fp32 ``model`` in ``precision`` and check it against the fp32 model.

    Args:
        model: the trained model, in fp32 (it is the parity reference); put in eval mode for
            the export and restored after.
        example_inputs: a tensor, a tuple of tensors (positional) or a dict (keywords).
        path: the file to write (``.onnx``, or ``.pt2`` for torch-export).
        precision: ``fp16``, ``bf16`` or ``fp32`` (or an alias such as ``float16``).
        format: ``onnx`` (torch's dynamo exporter, then the low-precision graph) or
            ``torch-export`` (an ``ExportedProgram`` under the precision's autocast).
        keep_fp32: module names to keep in fp32 on top of the op block-list; ``None`` asks
            the doctor (:func:`ampkit.diagnose`) which modules overflow or lose precision.
        keep_io_types: keep the graph's floating inputs and outputs fp32.
        check: run the parity check; when it fails nothing is written.
        parity_batches: how many random batches shaped like ``example_inputs`` to check on
            besides the examples, or the batches themselves (e.g. held-out data).
        tolerance: overrides :data:`~ampkit.deploy.parity.TOLERANCES` for ``precision``.
        dynamic_shapes: passed to ``torch.export.export`` (one entry per flat input).
        seed: seeds the random parity batches.

    Returns:
        The :class:`~ampkit.deploy.ExportResult`: file, size, what stayed fp32, parity table.

    Raises:
        ConfigurationError: an unknown precision or format, a model not in fp32, inputs that
            are not tensors, or ``path`` is a folder.
        MissingDependencyError: onnx, onnxscript, onnxruntime or onnxconverter-common is
            missing (format ``onnx``); the message names the ``export`` extra.
        ExportError: an op without ONNX translation, a dynamic dimension the model specialised,
            a node mixing dtypes, or a graph the runtime refuses (each named).
        ParityError: outputs are non-finite or outside the tolerance; ``error.result`` holds
            the table and nothing was written.
    """
    started = time.perf_counter()
    precision = _validate(model, precision, format, path)
    signature = resolve_signature(model, example_inputs)
    if isinstance(parity_batches, int):
        extra = random_batches(signature, parity_batches, seed)
    else:
        extra = [resolve_signature(model, b).inputs for b in parity_batches]
    batches = [signature.inputs, *extra]
    was_training = model.training
    model.eval()
    flat = FlatModel(model, signature)
    try:
        args, kwargs = signature.call_args(signature.inputs)
        with torch.no_grad():
            output_names = tuple(name for name, _ in flatten_outputs(model(*args, **kwargs)))
        if not output_names:
            raise ConfigurationError(
                "export: the model returned no tensors for example_inputs. It must return a "
                "tensor, or tuples/dicts of tensors."
            )
        reference = _reference(flat, batches)
        notes: list[str] = []
        if keep_fp32 is None:
            from ampkit.deploy.islands import doctor_keep_fp32

            modules, doctor_notes = doctor_keep_fp32(model, signature, precision)
            kept = dict.fromkeys(modules, "doctor")
            notes += doctor_notes
        else:
            kept = dict.fromkeys(keep_fp32, "user")
        if format == "onnx":
            data, fp32_size, fp32_nodes, lowering_notes = _onnx_bytes(
                flat, signature, output_names, precision, list(kept), keep_io_types, dynamic_shapes
            )
            notes += lowering_notes
        else:
            data, fp32_size, fp32_nodes = _program_bytes(
                flat, signature, precision, list(kept), keep_io_types, dynamic_shapes
            )
        parity: tuple[ParityReport, ...] = ()
        if check:
            parity, parity_notes = _parity(data, format, precision, signature.names,
                                           output_names, batches, reference,
                                           tolerance or TOLERANCES[precision])  # fmt: skip
            notes += parity_notes
    finally:
        model.train(was_training)
    target = Path(path)
    result = ExportResult(
        path=str(target),
        format=format,
        precision=precision,
        size_bytes=len(data),
        fp32_size_bytes=fp32_size,
        keep_fp32=kept,
        fp32_nodes=fp32_nodes,
        input_names=signature.names,
        output_names=output_names,
        parity=parity,
        notes=tuple(notes),
        seconds=time.perf_counter() - started,
    )
    failed = [report for report in parity if not report.passed]
    if failed:
        from dataclasses import replace

        names = sorted({o.name for r in failed for o in r.outputs if not o.passed})
        raise ParityError(
            f"export: parity check failed for output(s) {', '.join(names)} on "
            f"{' and '.join(r.runtime for r in failed)} (non-finite values, max rel above "
            f"{failed[0].tolerance.rel:g} or top-1 below {failed[0].tolerance.top1:.0%}); "
            f"nothing was written to {target}. Keep the failing modules in fp32 "
            "(keep_fp32=[...]) or export in bf16/fp32.",
            result=replace(result, path=None),
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
    return result


def _parity(data, format, precision, input_names, output_names, batches, reference, tolerance):
    """One parity report per runtime, and notes: ONNX Runtime on every batch (the reference
    evaluator where it has no bf16 kernels) plus, for fp16, the reference evaluator on the first
    batch (ONNX Runtime's CPU provider computes fp16 nodes in fp32 and would hide an overflow);
    when the reference evaluator cannot run the graph, a note says so instead."""
    from ampkit.deploy.runtime import run_onnx, run_program, run_reference

    if format != "onnx":
        actual, runtime, notes = run_program(data, batches)
        return (compare(output_names, reference, actual, tolerance, runtime, notes),), []
    actual, runtime, notes = run_onnx(data, input_names, batches, precision == "bf16")
    reports = [compare(output_names, reference, actual, tolerance, runtime, notes)]
    if precision == "fp16":
        try:
            actual, runtime, _ = run_reference(data, input_names, batches[:1])
        except ExportError as exc:
            return tuple(reports), [
                f"{exc} So fp16 overflow was checked only as ONNX Runtime computes it (most "
                "fp16 nodes in fp32 on the CPU), not node by node in fp16."
            ]
        why = (
            "every node in its declared dtype, on the first batch: ONNX Runtime's CPU provider "
            "runs fp16 nodes without CPU kernels in fp32, so an fp16 overflow shows only here"
        )
        reports.append(compare(output_names, reference[:1], actual, tolerance, runtime, [why]))
    return tuple(reports), []


def _program_bytes(
    flat: FlatModel,
    signature: Signature,
    precision: str,
    keep: list[str],
    keep_io_types: bool,
    dynamic_shapes: Any,
) -> tuple[bytes, int | None, dict[str, str]]:
    from ampkit.deploy.capture import capture
    from ampkit.precision.islands import keep_fp32

    module: nn.Module = flat
    islands = None
    if precision != "fp32":
        module = _Autocast(flat, _DTYPES[precision], keep_io_types)
        if keep:
            islands = keep_fp32(flat.model, keep)
    try:
        program = capture(module, signature.inputs, dynamic_shapes)
    finally:
        if islands is not None:
            islands.remove()
    buffer = io.BytesIO()
    try:
        torch.export.save(program, buffer)
    except Exception as exc:  # torch's serializer raises several types
        raise ExportError(
            f"export: torch.export.save could not serialize the program ({exc}). Export "
            "format='onnx' instead."
        ) from exc
    return buffer.getvalue(), None, {}

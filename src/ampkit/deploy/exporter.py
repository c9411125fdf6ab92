"""``ampkit.export``: a trained fp32 model to a low-precision file, checked against itself.

::

    result = ampkit.export(model, (tokens,), "model.onnx", precision="fp16")
    print(result.to_text())      # size, what stayed fp32, the parity table

The steps, each one in its own module:

1. :mod:`~ampkit.deploy.signature`: the inputs and outputs as flat, named tensors; the fp32
   reference outputs on the example inputs and a few more parity batches.
2. :mod:`~ampkit.deploy.fp32_nodes`: the modules to keep in fp32 (the doctor's, or yours).
3. The format (:mod:`ampkit.deploy.export_formats`, one module per format, looked up by name) converts:
   ``onnx``: :mod:`~ampkit.deploy.capture` (``torch.export``, then torch's dynamo exporter),
   :mod:`~ampkit.deploy.lowering` (the fp16/bf16 graph with its fp32 block-list) and
   :mod:`~ampkit.deploy.dtypes` (every node's inputs agree in dtype); ``torch-export``: the
   program captured under the precision's autocast.
4. The format runs the serialized bytes as a server would (:mod:`~ampkit.deploy.runtime`: ONNX
   Runtime CPU, or ``torch.export.load``) and :mod:`~ampkit.deploy.parity` compares them with
   the fp32 reference.
5. Only if parity passes is the file written (:mod:`~ampkit.deploy.target`): a temporary file
   in the target folder, fsynced, renamed into place. A failed export leaves nothing at
   ``path``.

Before any of it, the path is checked (writable, the format's suffix; temporary files that
killed exports left in its folder are removed) and the weights must be finite: a NaN weight
would make every output NaN, and so would the fp32 reference the parity check compares with.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampkit.deploy.export_formats import FORMATS, ExportFormat, get_format
from ampkit.deploy.parity import TOLERANCES, ParityReport, Tolerance
from ampkit.deploy.result import ExportResult
from ampkit.deploy.signature import (
    FlatModel,
    flatten_outputs,
    padding_positions,
    random_batches,
    resolve_signature,
)
from ampkit.deploy.target import check_target, remove_stale_temporaries, write_target
from ampkit.errors import ConfigurationError, NonFiniteWeightsError, ParityError
from ampkit.precision.policy import parse_precision

__all__ = ["export", "listed", "nonfinite_tensors"]


def _validate(
    model: nn.Module, precision: str, format: str, path: str | os.PathLike
) -> tuple[str, ExportFormat]:
    if not isinstance(model, nn.Module):
        raise ConfigurationError(
            f"export: model is a {type(model).__name__}, not a torch.nn.Module. Pass the model."
        )
    canonical = parse_precision(precision).precision if isinstance(precision, str) else None
    if canonical not in ("fp16", "bf16", "fp32"):  # fp8 and bf16-true are training precisions
        raise ConfigurationError(
            f"export: precision {precision!r} is not exportable. Use fp16, bf16 or fp32.",
            argument="precision",
        )
    exporter = get_format(format)
    for name, param in [*model.named_parameters(), *model.named_buffers()]:
        if param.is_floating_point() and param.dtype != torch.float32:
            raise ConfigurationError(
                f"export: {name!r} is {param.dtype}, but export starts from the fp32 model "
                "(it is the parity reference). Pass the model in fp32; export lowers it."
            )
    check_target(path, exporter.suffix, exporter.name)
    _check_finite(model, path)
    return canonical, exporter


def nonfinite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """``'name' (N NaN of M)`` for every floating tensor of ``named`` holding inf/NaN."""
    bad: list[str] = []
    for name, tensor in named:
        if not tensor.is_floating_point():
            continue
        with torch.no_grad():
            finite = torch.isfinite(tensor.detach())
            if bool(finite.all()):
                continue
            nan = int(torch.isnan(tensor.detach()).sum())
            count = int((~finite).sum())
        what = f"{nan} NaN" if nan == count else f"{count} inf/NaN"
        bad.append(f"{name!r} ({what} of {tensor.numel():,})")
    return bad


def listed(items: Sequence[str], first: int = 5) -> str:
    """The first ``first`` of ``items``, and how many more."""
    more = len(items) - first
    return ", ".join(items[:first]) + (f" and {more} more" if more > 0 else "")


def _check_finite(model: nn.Module, path: str | os.PathLike) -> None:
    """Refuse weights holding inf/NaN, naming the first few tensors and the count."""
    bad = nonfinite_tensors([*model.named_parameters(), *model.named_buffers()])
    if bad:
        raise NonFiniteWeightsError(
            f"export: {len(bad)} weight tensor(s) hold inf/NaN: {listed(bad)}. The exported "
            f"model (and the fp32 reference it is checked against) would compute inf/NaN; "
            f"nothing was written to {path}. Export finite weights: an earlier checkpoint of "
            "the run, or retrain from where it diverged."
        )


def _advice(precision: str) -> str:
    """What to do after a failed parity check, for what was asked."""
    if precision == "fp32":
        return (
            "The fp32 graph itself disagrees with the model: the exporter changed the "
            "computation. Report it with the model; meanwhile try format='torch-export'."
        )
    other = "bf16 or fp32" if precision == "fp16" else "fp32"
    return (
        "Keep the failing modules in fp32 (keep_fp32=[module names]; keep_fp32=None asks "
        f"the doctor which), or export in {other}."
    )


def _reference(
    flat: FlatModel,
    batches: Sequence[Sequence[torch.Tensor]],
    progress: Callable[[str, int, int], None] | None = None,
):
    outputs = []
    with torch.no_grad():
        for batch in batches:
            outputs.append(flat(*batch))
            if progress is not None:
                progress("fp32 reference batches", len(outputs), len(batches))
    return [[t.float().numpy() if t.is_floating_point() else t.numpy() for t in o] for o in outputs]


def export(
    model: nn.Module,
    example_inputs: Any,
    path: str | os.PathLike,
    precision: str = "fp16",
    format: str = "onnx",
    keep_fp32: Sequence[str] | None = None,
    *,
    keep_io_types: bool = True,
    check: bool = True,
    parity_batches: int | Sequence[Any] = 3,
    tolerance: Tolerance | None = None,
    dynamic_shapes: Any = None,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> ExportResult:
    """Export the fp32 ``model`` in ``precision`` and check it against the fp32 model.

    Args:
        model: the trained model, in fp32 (it is the parity reference); put in eval mode for
            the export and restored after.
        example_inputs: a tensor, a tuple of tensors (positional) or a dict (keywords).
        path: the file to write (``.onnx``, or ``.pt2`` for torch-export).
        precision: ``fp16``, ``bf16`` or ``fp32`` (or an alias such as ``float16``).
        format: a name of :data:`~ampkit.deploy.export_formats.FORMATS`: ``onnx`` (torch's dynamo
            exporter, then the low-precision graph) or ``torch-export`` (an
            ``ExportedProgram`` under the precision's autocast).
        keep_fp32: module names to keep in fp32 on top of the op block-list; ``None`` asks
            the doctor (:func:`ampkit.diagnose`) which modules overflow or lose precision.
        keep_io_types: keep the graph's floating inputs and outputs fp32.
        check: run the parity check; when it fails nothing is written.
        parity_batches: how many random batches shaped like ``example_inputs`` to check on
            besides the examples, or the batches themselves (e.g. held-out data).
        tolerance: overrides :data:`~ampkit.deploy.parity.TOLERANCES` for ``precision``.
        dynamic_shapes: passed to ``torch.export.export`` (one entry per flat input).
        seed: seeds the random parity batches.
        progress: called as ``progress(stage, done, total)`` after each parity batch of the
            fp32 reference (``"fp32 reference batches"``) and of the exported file
            (``"parity batches"``), and with the doctor's stages (``"doctor: ..."``) when it
            chooses ``keep_fp32``; nothing is printed.

    Returns:
        The :class:`~ampkit.deploy.ExportResult`: file, size, what stayed fp32, parity table.

    Raises:
        ConfigurationError: an unknown precision or format, a model not in fp32, inputs that
            are not tensors, or a ``path`` that cannot be written: a folder, a suffix other
            than the format's (``.onnx``, ``.pt2``), a folder that refuses new files (checked
            before any work).
        NonFiniteWeightsError: a parameter or buffer holds inf/NaN (the message names the
            first few and the count); nothing was written.
        StorageError: writing the file failed (a full disk, ...); the message names the file.
        MissingDependencyError: onnx, onnxscript, onnxruntime or onnxconverter-common is
            missing (format ``onnx``); the message names the ``export`` extra.
        ExportError: an op without ONNX translation, a dynamic dimension the model specialised,
            a node mixing dtypes, or a graph the runtime refuses (each named).
        ParityError: outputs are non-finite or outside the tolerance, or the fp32 reference
            itself is non-finite; ``error.result`` holds the table and nothing was written.
    """
    started = time.perf_counter()
    precision, exporter = _validate(model, precision, format, path)
    target = Path(path)
    stale = remove_stale_temporaries(target.parent, {f.suffix for f in FORMATS.values()})
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
        reference = _reference(flat, batches, progress)
        notes: list[str] = []
        if stale:
            notes.append(
                f"removed {len(stale)} temporary file(s) of earlier interrupted exports from "
                f"{target.parent}: {', '.join(stale)}"
            )
        if keep_fp32 is None:
            from ampkit.deploy.fp32_nodes import doctor_keep_fp32

            modules, doctor_notes = doctor_keep_fp32(model, signature, precision, progress)
            kept = dict.fromkeys(modules, "doctor")
            notes += doctor_notes
        else:
            kept = dict.fromkeys(keep_fp32, "user")
        converted = exporter.convert(
            flat, signature, output_names, precision, list(kept), keep_io_types, dynamic_shapes
        )
        data = converted.data
        notes += converted.notes
        kept = {name: why for name, why in kept.items() if name not in converted.unmatched}
        for module in converted.unmatched:  # the doctor's notes say kept; the graph has no node
            notes = [
                n.replace(f"(kept {module} in fp32)", f"({module} has no node in the graph)")
                for n in notes
            ]
        parity: tuple[ParityReport, ...] = ()
        if check:
            compared = [
                padding_positions(signature.names, batch, output_names, outputs)
                for batch, outputs in zip(batches, reference, strict=True)
            ]
            parity, parity_notes = exporter.run_parity(
                data,
                precision,
                signature.names,
                output_names,
                batches,
                reference,
                tolerance or TOLERANCES[precision],
                compared=compared,
                progress=progress,
            )
            notes += parity_notes
    finally:
        model.train(was_training)
    result = ExportResult(
        path=str(target),
        format=exporter.name,
        precision=precision,
        size_bytes=len(data),
        fp32_size_bytes=converted.fp32_size,
        keep_fp32=kept,
        fp32_nodes=dict(converted.fp32_nodes),
        input_names=signature.names,
        output_names=output_names,
        parity=parity,
        notes=tuple(notes),
        seconds=time.perf_counter() - started,
    )
    failed = [report for report in parity if not report.passed]
    if failed:
        names = sorted({o.name for r in failed for o in r.outputs if not o.passed})
        unreferenced = sorted({o.name for r in failed for o in r.outputs if o.reference_nonfinite})
        if unreferenced:
            count = max(o.reference_nonfinite for r in failed for o in r.outputs)
            raise ParityError(
                f"export: parity check failed: the fp32 reference itself is non-finite in "
                f"output(s) {', '.join(unreferenced)} (up to {count:,} inf/NaN values), so "
                f"nothing can be checked against it; nothing was written to {target}. The "
                "model computes inf/NaN in fp32 on these inputs: fix the model or the inputs "
                "(ampkit.detect_nonfinite(model) names the first module that makes one).",
                result=replace(result, path=None),
            )
        first: dict[str, tuple[str, ...]] = {}  # each output's failures on its first runtime
        for report in failed:
            for o in report.outputs:
                if o.failures and o.name not in first:
                    first[o.name] = o.failures
        why = "; ".join(f"{name}: {', '.join(f)}" for name, f in first.items())
        raise ParityError(
            f"export: parity check failed for output(s) {', '.join(names)} on "
            f"{' and '.join(r.runtime for r in failed)} ({why}); nothing was written to "
            f"{target}. {_advice(precision)}",
            result=replace(result, path=None),
        )
    write_target(target, data)
    return result

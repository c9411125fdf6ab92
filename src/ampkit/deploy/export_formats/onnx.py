"""``format="onnx"``: torch's dynamo exporter, then the fp16/bf16 graph with its fp32
block-list (:mod:`~ampkit.deploy.lowering`), run by ONNX Runtime on the CPU for parity."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ampkit.deploy.export_formats.base import Converted, ExportFormat, register

if TYPE_CHECKING:
    import numpy as np

    from ampkit.deploy.parity import ParityReport, Tolerance
    from ampkit.deploy.signature import FlatModel, Signature

__all__ = ["OnnxFormat"]


@register
class OnnxFormat(ExportFormat):
    """An ONNX graph: ``torch.export``, torch's dynamo exporter (onnxscript), then the
    low-precision graph with normalisations, softmax, reductions and the kept modules in fp32;
    every node's inputs are checked to agree in dtype."""

    name = "onnx"
    suffix = ".onnx"
    summary = "torch's dynamo exporter"
    requires = ("onnx", "onnxscript", "onnxruntime", "onnxconverter_common")

    def convert(
        self,
        flat: FlatModel,
        signature: Signature,
        output_names: Sequence[str],
        precision: str,
        keep_fp32: list[str],
        keep_io_types: bool,
        dynamic_shapes: Any,
    ) -> Converted:
        from ampkit.deploy.capture import capture, to_onnx
        from ampkit.deploy.dtypes import validate_dtypes
        from ampkit.deploy.lowering import lower

        program = capture(flat, signature.inputs, dynamic_shapes)
        proto = to_onnx(program, signature.names, output_names)
        lowering = lower(proto, precision, keep_fp32, keep_io_types)
        validate_dtypes(lowering.model)
        notes = [f"constant clipped to the fp16 range: {c}" for c in lowering.clipped]
        if lowering.saturated:
            notes.append(
                f"out-of-range constants (attention-mask fills) brought to half the {precision} "
                f"range, so masked rows stay finite: {', '.join(lowering.saturated)}"
            )
        if lowering.relabelled:
            notes.append(
                f"{lowering.relabelled} node output(s) made fp16 where the fp16 converter "
                "declared fp16 but left the node producing fp32 (Cast(to=FLOAT), readers of "
                "fp32 graph outputs)"
            )
        if lowering.repaired:
            notes.append(
                f"cast {lowering.repaired} fp32 input(s) of fp16 nodes that the fp16 converter "
                "left fp32 (graph outputs also read inside the graph)"
            )
        if lowering.missing_modules:
            missing = [repr(m) for m in lowering.missing_modules]
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            notes.append(
                f"{len(missing)} keep_fp32 name(s) match no node of the graph and were not "
                f"kept: {', '.join(missing[:5])}{more} (modules that compute nothing, such as Dropout or "
                "Identity in eval mode, whose ops the exporter folded into a neighbour, or "
                "names that are not module paths of the model)"
            )
        return Converted(
            data=lowering.model.SerializeToString(),
            fp32_size=lowering.fp32_size,
            fp32_nodes=lowering.fp32_nodes,
            notes=tuple(notes),
            unmatched=lowering.missing_modules,
        )

    def run_parity(
        self,
        data: bytes,
        precision: str,
        input_names: Sequence[str],
        output_names: Sequence[str],
        batches: Sequence[Sequence[Any]],
        reference: list[list[np.ndarray]],
        tolerance: Tolerance,
        compared: Sequence[Sequence[np.ndarray | None]] | None = None,
        *,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> tuple[tuple[ParityReport, ...], list[str]]:
        """ONNX Runtime on every batch (the reference evaluator where it has no bf16 kernels)
        plus, for fp16, the reference evaluator on the first batch (ONNX Runtime's CPU provider
        computes fp16 nodes in fp32 and would hide an overflow); when the reference evaluator
        cannot run the graph, a note says so instead."""
        from ampkit.deploy.parity import compare
        from ampkit.deploy.runtime import run_onnx, run_reference
        from ampkit.errors import ExportError

        actual, runtime, notes = run_onnx(
            data, input_names, batches, precision == "bf16", progress=progress
        )
        reports = [compare(output_names, reference, actual, tolerance, runtime, notes, compared)]
        if precision == "fp16":
            try:
                actual, runtime, _ = run_reference(data, input_names, batches[:1])
            except ExportError as exc:
                return tuple(reports), [
                    f"{exc} So fp16 overflow was checked only as ONNX Runtime computes it "
                    "(most fp16 nodes in fp32 on the CPU), not node by node in fp16."
                ]
            why = (
                "every node in its declared dtype, on the first batch: ONNX Runtime's CPU "
                "provider runs fp16 nodes without CPU kernels in fp32, so an fp16 overflow "
                "shows only here"
            )
            first = None if compared is None else compared[:1]
            reports.append(
                compare(output_names, reference[:1], actual, tolerance, runtime, [why], first)
            )
        return tuple(reports), []

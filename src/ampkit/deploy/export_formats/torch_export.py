"""``format="torch-export"``: an ``ExportedProgram`` captured under the precision's autocast
(the kept modules in fp32), saved with ``torch.export.save`` and run back through
``torch.export.load`` for parity. Needs no optional package."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ampkit.deploy.export_formats.base import Converted, ExportFormat, register

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ampkit.deploy.parity import ParityReport, Tolerance
    from ampkit.deploy.signature import FlatModel, Signature

__all__ = ["TorchExportFormat"]


def _autocast_module(model: torch.nn.Module, precision: str, keep_io_types: bool) -> Any:
    """``model`` under ``torch.autocast`` in ``precision``'s dtype; floating outputs back to
    fp32 when ``keep_io_types``."""
    import torch
    from torch import nn

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]

    class _Autocast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with torch.autocast("cpu", dtype=dtype):
                outputs = self.model(*flat)
            if keep_io_types:
                return tuple(t.float() if t.is_floating_point() else t for t in outputs)
            return outputs

    return _Autocast()


@register
class TorchExportFormat(ExportFormat):
    """A ``torch.export`` program (``.pt2``), traced under the precision's autocast: the
    weights stay fp32 and autocast's op lists decide each op's dtype."""

    name = "torch-export"
    suffix = ".pt2"
    summary = "ExportedProgram under autocast"
    requires = ()

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
        import torch

        from ampkit.deploy.capture import capture
        from ampkit.errors import ExportError
        from ampkit.precision.fp32_modules import keep_fp32 as keep_in_fp32

        module: torch.nn.Module = flat
        islands = None
        if precision != "fp32":
            module = _autocast_module(flat, precision, keep_io_types)
            if keep_fp32:
                islands = keep_in_fp32(flat.model, keep_fp32)
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
        return Converted(data=buffer.getvalue())

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
        """``torch.export.load`` of the saved bytes, on every batch."""
        from ampkit.deploy.parity import compare
        from ampkit.deploy.runtime import run_program

        actual, runtime, notes = run_program(data, batches, progress=progress)
        return (compare(output_names, reference, actual, tolerance, runtime, notes, compared),), []

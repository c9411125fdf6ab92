"""Deployment in low precision: ``ampkit.export`` to ONNX (fp16/bf16) or ``torch.export``,
with a parity check against the fp32 model.

* :func:`export`: the whole path; returns an :class:`ExportResult` with the parity table.
* :func:`check_dtypes`: nodes of an ONNX graph whose inputs disagree in dtype.
* :data:`FP32_OPS`, :data:`TOLERANCES`: the op block-list and the parity tolerances.

The package is ``ampkit.deploy`` (not ``ampkit.export``) so that the function
``ampkit.export`` and a submodule never share a name. torch is imported here; onnx,
onnxscript, onnxruntime and onnxconverter-common only when an ONNX export runs.
"""

from ampkit.deploy.dtypes import DtypeProblem as DtypeProblem
from ampkit.deploy.dtypes import check_dtypes as check_dtypes
from ampkit.deploy.dtypes import validate_dtypes as validate_dtypes
from ampkit.deploy.exporter import export as export
from ampkit.deploy.lowering import FP32_OPS as FP32_OPS
from ampkit.deploy.parity import TOLERANCES as TOLERANCES
from ampkit.deploy.parity import OutputParity as OutputParity
from ampkit.deploy.parity import ParityReport as ParityReport
from ampkit.deploy.parity import Tolerance as Tolerance
from ampkit.deploy.result import ExportResult as ExportResult

__all__ = [
    "FP32_OPS",
    "TOLERANCES",
    "DtypeProblem",
    "ExportResult",
    "OutputParity",
    "ParityReport",
    "Tolerance",
    "check_dtypes",
    "export",
    "validate_dtypes",
]

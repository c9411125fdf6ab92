"""Deployment in low precision: ``ampkit.export`` to ONNX (fp16/bf16) or ``torch.export``,
with a parity check against the fp32 model.

* :func:`export`: the whole path; returns an :class:`ExportResult` with the parity table.
* :func:`check_dtypes`: nodes of an ONNX graph whose inputs disagree in dtype.
* :data:`FP32_OPS`, :data:`TOLERANCES`: the op block-list and the parity tolerances.

The package is ``ampkit.deploy`` (not ``ampkit.export``) so that the function
``ampkit.export`` and a submodule never share a name. The names below are imported on first
use (torch with them); onnx, onnxscript, onnxruntime and onnxconverter-common only when an
ONNX export runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Public name -> the module that defines it, imported on first use, so that the torch-free
#: parts (the format registry ``ampkit export --help`` lists) do not import torch.
_EXPORTS = {
    "DtypeProblem": "ampkit.deploy.dtypes",
    "check_dtypes": "ampkit.deploy.dtypes",
    "validate_dtypes": "ampkit.deploy.dtypes",
    "export": "ampkit.deploy.exporter",
    "FP32_OPS": "ampkit.deploy.lowering",
    "TOLERANCES": "ampkit.deploy.parity",
    "OutputParity": "ampkit.deploy.parity",
    "ParityReport": "ampkit.deploy.parity",
    "Tolerance": "ampkit.deploy.parity",
    "ExportResult": "ampkit.deploy.result",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ampkit.deploy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


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

"""The optional packages the ONNX path needs, imported on first use.

``pip install 'ampkit[export]'`` installs onnx, onnxscript (torch's ONNX exporter is built on
it), onnxruntime (CPU) and onnxconverter-common. The ``torch-export`` format needs none of them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ampkit.errors import MissingDependencyError

__all__ = ["require"]

_WHY = {
    "onnx": "to build and check ONNX graphs",
    "onnxscript": "for torch.onnx.export(..., dynamo=True)",
    "onnxruntime": "to run the parity check",
    "onnxconverter_common": "to convert graphs to fp16",
}


def require(name: str) -> ModuleType:
    """Import ``name`` or say which extra installs it.

    Raises:
        MissingDependencyError: the package is not installed; the message names the extra.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        package = name.replace("_", "-")
        raise MissingDependencyError(
            f"export: the package {package!r} is needed {_WHY.get(name, '')} but cannot be "
            f"imported ({exc}). Install the export extra: pip install 'ampkit[export]'."
        ) from None

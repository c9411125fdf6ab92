"""The output formats of :func:`ampkit.export`, one module each, registered in one place.

* :mod:`~ampkit.deploy.export_formats.onnx`: ``onnx``, torch's dynamo exporter and the fp16/bf16
  graph, checked on ONNX Runtime;
* :mod:`~ampkit.deploy.export_formats.torch_export`: ``torch-export``, an ``ExportedProgram`` under
  autocast, checked through ``torch.export.load``.

:func:`get_format` is the one place a format name is looked up. A new format is a module
here with an :class:`~ampkit.deploy.export_formats.base.ExportFormat` subclass decorated with
:func:`~ampkit.deploy.export_formats.base.register`, added to ``_MODULES``. Importing this package
does not import torch.
"""

from __future__ import annotations

from ampkit.deploy.export_formats import onnx, torch_export
from ampkit.deploy.export_formats.base import FORMATS, Converted, ExportFormat, register
from ampkit.errors import ConfigurationError

__all__ = ["FORMATS", "Converted", "ExportFormat", "format_names", "get_format", "register"]

_MODULES = (onnx, torch_export)


def format_names() -> tuple[str, ...]:
    """The registered format names, in registration order (the first is the default)."""
    return tuple(FORMATS)


def get_format(name: object) -> ExportFormat:
    """The format registered as ``name``.

    Raises:
        ConfigurationError: no format has that name (the message lists the known ones).
    """
    if not isinstance(name, str) or name not in FORMATS:
        known = " or ".join(repr(n) for n in FORMATS)
        raise ConfigurationError(f"export: format {name!r} is unknown. Use {known}.")
    return FORMATS[name]()

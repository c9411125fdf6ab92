"""The registry of export formats: names, suffixes, optional packages, and the lookup."""

from __future__ import annotations

import pytest
import torch

import ampkit
from ampkit.deploy.export_formats import FORMATS, ExportFormat, format_names, get_format, register
from ampkit.deploy.export_formats.onnx import OnnxFormat
from ampkit.deploy.export_formats.torch_export import TorchExportFormat
from ampkit.errors import ConfigurationError


def test_the_registry_holds_onnx_first_then_torch_export():
    assert format_names() == ("onnx", "torch-export")
    assert FORMATS["onnx"] is OnnxFormat and FORMATS["torch-export"] is TorchExportFormat
    assert (OnnxFormat.suffix, TorchExportFormat.suffix) == (".onnx", ".pt2")
    assert "onnxruntime" in OnnxFormat.requires and TorchExportFormat.requires == ()


def test_unknown_names_are_refused_with_the_known_ones(tmp_path):
    with pytest.raises(ConfigurationError, match="format 'tflite' is unknown. Use 'onnx' or"):
        get_format("tflite")
    with pytest.raises(ConfigurationError, match="format 'tflite' is unknown"):
        ampkit.export(torch.nn.Linear(2, 2), torch.ones(1, 2), tmp_path / "m", format="tflite")
    assert not (tmp_path / "m").exists()


def test_duplicate_names_are_refused():
    class Again(ExportFormat):
        name = "onnx"

    with pytest.raises(ValueError, match="duplicate name 'onnx'"):
        register(Again)


def test_the_command_line_offers_the_registered_formats():
    from ampkit.cli.export_cmd import export

    (option,) = [p for p in export.params if p.name == "format_"]
    assert tuple(option.type.choices) == format_names()


def test_a_registered_format_is_used_by_export(tmp_path):
    calls = []

    class Recorded(TorchExportFormat):
        name = "recorded"

        def convert(self, *args, **kwargs):
            calls.append("convert")
            return super().convert(*args, **kwargs)

    register(Recorded)
    try:
        result = ampkit.export(
            torch.nn.Linear(4, 3), torch.randn(2, 4), tmp_path / "m.pt2",
            precision="fp32", format="recorded", keep_fp32=[], parity_batches=1,
        )  # fmt: skip
    finally:
        FORMATS.pop("recorded")
    assert calls == ["convert"] and result.format == "recorded" and result.passed
    assert (tmp_path / "m.pt2").stat().st_size == result.size_bytes

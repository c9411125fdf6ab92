"""Library errors name arguments (``model: ...``); the command line speaks them as flags."""

from __future__ import annotations

import pickle

from click.testing import CliRunner

from ampkit.cli import _spoken_as_flag, main
from ampkit.errors import ConfigurationError, MissingDependencyError


def test_the_argument_becomes_its_flag():
    error = ConfigurationError(
        "batch_size: 0 is invalid. Use an integer >= 1.", argument="batch_size"
    )
    assert _spoken_as_flag(error) == "--batch-size: 0 is invalid. Use an integer >= 1."
    assert _spoken_as_flag(MissingDependencyError("model: hf: ...", argument="model")) == (
        "--model: hf: ..."
    )


def test_errors_without_an_argument_or_not_led_by_it_are_unchanged():
    assert _spoken_as_flag(ConfigurationError("model: x")) == "model: x"
    assert _spoken_as_flag(ConfigurationError("export: model: x", argument="model")) == (
        "export: model: x"
    )


def test_the_argument_survives_pickling_and_defaults_to_none():
    error = pickle.loads(pickle.dumps(ConfigurationError("model: x", argument="model")))
    assert error.argument == "model" and str(error) == "model: x"
    assert ConfigurationError("plain").argument is None


def test_a_model_mistake_reads_as_the_flag_on_every_command(tmp_path):
    for command in (["bench"], ["doctor"], ["export", "--out", str(tmp_path / "m.onnx")]):
        result = CliRunner().invoke(main, [*command, "--model", "resnet"])
        assert result.exit_code == 2, result.output
        assert "ampkit: error: --model: 'resnet' is not a model" in result.output

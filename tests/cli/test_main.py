"""The ``ampkit`` group: click's own usage errors are one line too, help and version exit 0."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ampkit.cli import main


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), prog_name="ampkit")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["train", "--steps", "abc"],
            "ampkit: error: Invalid value for '--steps': 'abc' is not a valid integer. "
            "See 'ampkit train --help'.",
        ),
        (
            ["trian"],
            "ampkit: error: No such command 'trian'. Did you mean 'train'? See 'ampkit --help'.",
        ),
        (
            ["lint", "--format", "xml"],
            "ampkit: error: Invalid value for '--format': 'xml' is not one of 'text', 'json', "
            "'sarif', 'github'. See 'ampkit lint --help'.",
        ),
        (
            ["checkpoint", "export"],
            "ampkit: error: Missing argument 'RUN'. See 'ampkit checkpoint export --help'.",
        ),
    ],
)
def test_usage_error_is_one_line_with_the_help_to_read_and_exit_2(args, line):
    result = _invoke(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [line]


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["train", "--help"]])
def test_help_and_version_exit_0(args):
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() and result.stderr == ""


def test_bare_ampkit_shows_the_help_page():
    result = _invoke()
    assert "Commands:" in result.output and "ampkit: error" not in result.output

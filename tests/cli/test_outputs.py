"""Output paths (--json, --html, --plot) are checked by writing, before any work starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ampkit.cli import main
from ampkit.cli.outputs import check_output
from ampkit.errors import ConfigurationError

needs_sysfs = pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="needs Linux /sys")


@needs_sysfs
@pytest.mark.parametrize("path", ["/sys/report.html", "/proc/report.json"])
def test_folders_that_refuse_files_are_refused_even_as_root(path):
    with pytest.raises(ConfigurationError, match=r"refuses new files"):
        check_output(path, "--json")


def test_a_writable_folder_passes_and_keeps_no_probe(tmp_path: Path):
    check_output(str(tmp_path / "report.json"), "--json")
    check_output("-", "--json")  # standard output
    assert list(tmp_path.iterdir()) == []


@needs_sysfs
@pytest.mark.parametrize(
    "args",
    [
        ["doctor", "--json", "/proc/d.json"],
        ["doctor", "--html", "/sys/d.html"],
        ["bench", "--json", "/proc/b.json"],
        ["bench", "--plot", "/sys/b.png"],
    ],
)
def test_commands_exit_2_before_any_work(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "refuses new files" in lines[0]

"""Progress on stderr: the bar the CLI draws from the library's ``progress`` callbacks (only on a
terminal, never with ``--no-progress``), and the counts ``lint_files`` and ``export`` report."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner

from ampkit.cli import main
from ampkit.cli.lint_cmd import PROGRESS_FILES
from ampkit.cli.progress import Progress
from ampkit.lint.api import lint_files
from ampkit.lint.discovery import discover


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_bar_per_stage():
    stream = Terminal()
    with Progress(stream=stream, unit={"fp32 steps": "step"}, mininterval=0) as progress:
        for done in range(4):
            progress("fp32 steps", done, 3)
        progress("module re-runs", 5, 9)
    text = stream.getvalue()
    assert "fp32 steps" in text and "3/3" in text and "step" in text
    assert "module re-runs" in text and "5/9" in text


@pytest.mark.parametrize("enabled, stream", [(True, io.StringIO()), (False, Terminal())])
def test_no_bar_off_a_terminal_or_when_turned_off(enabled, stream):
    with Progress(enabled, stream=stream) as progress:
        progress("files", 0, 30)
        progress("files", 30, 30)
    assert not progress.enabled
    assert stream.getvalue() == ""


def _files(folder, count: int) -> None:
    for i in range(count):
        (folder / f"m{i:02d}.py").write_text(f"x{i} = {i}\n")


def test_lint_files_reports_every_file(tmp_path):
    _files(tmp_path, 25)
    files, _ = discover([str(tmp_path)], ())
    calls: list[tuple[str, int, int]] = []
    lint_files(files, jobs=1, progress=lambda *c: calls.append(c))
    assert calls == [("files", done, 25) for done in range(26)]


def test_lint_prints_nothing_extra_off_a_terminal(tmp_path):
    _files(tmp_path, PROGRESS_FILES + 5)
    shown = CliRunner().invoke(main, ["lint", str(tmp_path)])
    quiet = CliRunner().invoke(main, ["lint", str(tmp_path), "--no-progress"])
    assert shown.exit_code == quiet.exit_code == 0, shown.output
    assert (shown.stdout, shown.stderr) == (quiet.stdout, quiet.stderr) == ("", "")


def _export_progress(tmp_path, precision: str, parity_batches: int) -> list[tuple[str, int, int]]:
    """The progress calls of ``ampkit.export`` of a small MLP to torch-export."""
    import torch

    import ampkit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    calls: list[tuple[str, int, int]] = []
    ampkit.export(
        model,
        torch.randn(2, 8),
        tmp_path / "m.pt2",
        precision=precision,
        format="torch-export",
        parity_batches=parity_batches,
        progress=lambda *c: calls.append(c),
    )
    return calls


def test_export_reports_each_parity_batch(tmp_path):
    calls = _export_progress(tmp_path, "fp32", parity_batches=2)
    assert calls == [
        *(("fp32 reference batches", done, 3) for done in (1, 2, 3)),
        *(("parity batches", done, 3) for done in (1, 2, 3)),
    ]


def test_every_long_command_has_no_progress():
    for command in ("doctor", "export", "lint"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert "--no-progress" in result.output, command


def test_export_passes_the_doctors_progress_on(tmp_path):
    calls = _export_progress(tmp_path, "bf16", parity_batches=1)
    assert ("doctor: fp32 steps", 1, 1) in calls
    assert ("doctor: module re-runs", 4, 4) in calls  # the Sequential and its three layers
    assert calls[-1] == ("parity batches", 2, 2)

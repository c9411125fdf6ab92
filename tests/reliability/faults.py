"""Helpers of the fault-injection tests: run the CLI, and read what a failed run said and left.

Every failure path is held to the same promise: exactly one line on stderr, starting with
``ampkit: error:``, no traceback, a documented exit code, and the files on disk as stated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from ampkit.cli import main

#: The smallest ampkit train run that still exercises everything (a second or two of compute).
TINY = [
    "--steps",
    "4",
    "--n-layer",
    "1",
    "--n-embd",
    "32",
    "--n-head",
    "2",
    "--seq-len",
    "16",
    "--batch-size",
    "2",
    "--log-every",
    "1",
    "--precision",
    "fp32",
    "--no-progress",
]


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


def cli(*args: str) -> Run:
    """``ampkit ARGS`` in this process (click's runner: stdout and stderr apart)."""
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback would have reached the user
    return Run(result.exit_code, result.stdout, result.stderr)


def spawn(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    """``python -m ampkit ARGS`` as a child in a session of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "ampkit", *args],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run(*args: str, timeout: float = 300) -> Run:
    """``python -m ampkit ARGS`` to the end."""
    child = spawn(*args)
    stdout, stderr = child.communicate(timeout=timeout)
    return Run(child.returncode, stdout, stderr)


def error_line(result: Run) -> str:
    """The one error line a failed run printed (asserting there is exactly one).

    Every error is one ``ampkit: error:`` line, also a usage error that click itself catches
    (a value of the wrong type, a folder where a file is wanted).
    """
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ampkit: error: "), lines[0]
    return lines[0]


def metric_steps(out: Path) -> list[int]:
    """Steps of metrics.jsonl, asserting every line is a whole JSON row."""
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def wait_for_rows(out: Path, rows: int, child: subprocess.Popen, timeout: float = 240) -> None:
    """Wait until ``out/metrics.jsonl`` holds ``rows`` rows while ``child`` runs (it must not
    end first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert child.poll() is None, child.communicate()
        path = out / "metrics.jsonl"
        if path.exists() and path.read_text().count("\n") >= rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {rows} metric rows in {timeout} s")

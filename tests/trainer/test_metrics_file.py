"""metrics.jsonl holds whole rows only; a resume repairs a torn last row and refuses worse."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ampkit import DataError
from ampkit._files import append_record
from ampkit.trainer.callbacks import MetricsFile
from ampkit.trainer.metrics import StepMetrics


class View:
    """The part of a Trainer a MetricsFile reads."""

    def __init__(self, step: int, resumed: bool) -> None:
        self.step, self.is_main = step, True
        self.resumed_from = Path("ckpt") if resumed else None


def row(step: int) -> str:
    return StepMetrics(step, 1.0, 1e-3, 1.0, False, None, 1.0, 1.0).to_json() + "\n"


def test_resume_drops_a_torn_last_row_and_rows_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(row(1) + row(2) + row(3) + '{"step":4,"lo')
    metrics = MetricsFile(path)
    metrics.on_fit_start(View(step=2, resumed=True))
    metrics.on_log(View(3, True), StepMetrics(3, 2.0, 1e-3, 1.0, False, None, 1.0, 1.0))
    metrics.close()
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert metrics.dropped and "torn last row" in metrics.dropped[0]


def test_resume_refuses_a_damaged_row_that_is_not_the_last(tmp_path):
    path = tmp_path / "metrics.jsonl"
    before = row(1) + "garbage\n" + row(2)
    path.write_text(before)
    with pytest.raises(DataError, match="line 2 of .* is not JSON"):
        MetricsFile(path).on_fit_start(View(step=2, resumed=True))
    assert path.read_text() == before


def test_append_record_writes_whole_records(tmp_path):
    path = tmp_path / "log"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        append_record(fd, b"one\n")
        append_record(fd, b"two\n")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"

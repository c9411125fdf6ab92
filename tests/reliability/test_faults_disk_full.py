"""A full disk (a 2 MiB tmpfs): one line, exit 1, only whole metrics rows, and a run that
resumes once there is room again (issue 10 item 5). Skipped where tmpfs cannot be mounted."""

from __future__ import annotations

import os
import subprocess

import pytest
from faults import TINY, cli, error_line, metric_steps

from ampkit import StorageError
from ampkit.trainer.callbacks import MetricsFile
from ampkit.trainer.metrics import StepMetrics

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@pytest.fixture
def disk(tmp_path):
    """A 2 MiB tmpfs mounted for the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk, leave: int = 0) -> None:
    """Fill the disk until only ``leave`` bytes are free."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    with open(disk / "filler", "wb") as f:
        try:
            f.write(b"\0" * max(0, free - leave))
            f.flush()
        except OSError:  # the last page did not fit: the disk is full, as wanted
            pass


class View:
    """A Trainer resuming at step 0, as a MetricsFile sees it."""

    step, is_main, resumed_from = 0, True, "checkpoints/step-00000000"


def test_a_row_that_does_not_fit_is_cut_back_to_whole_rows(disk):
    path = disk / "metrics.jsonl"
    path.write_bytes(b'{"step":0}' + b" " * (PAGE - 30) + b"\n")  # 19 bytes short of a page
    before = path.read_bytes()
    metrics = MetricsFile(path)
    metrics.on_fit_start(View())
    fill(disk)
    row = StepMetrics(1, 1.0, 1e-3, 1.0, False, None, 1.0, 1.0)
    with pytest.raises(StorageError, match="the disk is full"):
        metrics.on_log(View(), row)  # a short write: 19 bytes fit, the rest does not
    metrics.close()
    assert path.read_bytes() == before


def test_a_full_disk_at_the_start_is_one_line(disk):
    fill(disk)
    result = cli("train", *TINY, "--out", str(disk / "run"))
    assert result.code == 1
    assert "the disk is full" in error_line(result)
    assert not (disk / "run" / "metrics.jsonl").exists()


def test_a_run_that_fills_the_disk_stops_and_resumes_when_there_is_room(disk):
    out = disk / "run"
    fill(disk, leave=600 * 1024)  # room for one checkpoint of the tiny model, not two
    args = ["train", *TINY, "--out", str(out), "--checkpoint-every", "2"]
    result = cli(*args)
    assert result.code == 1
    assert "No space left on device" in error_line(result) or "full" in error_line(result)
    assert metric_steps(out) == [1, 2, 3, 4]  # whole rows only
    assert not (out / "model.safetensors").exists()
    (disk / "filler").unlink()
    resumed = cli(*args, "--resume", "auto")
    assert resumed.code == 0, resumed
    assert "at step 2" in resumed.stdout
    assert metric_steps(out) == [1, 2, 3, 4] and (out / "model.safetensors").exists()

"""Concurrent runs, SIGKILL during a checkpoint write, and kills of ``--nproc 2`` jobs
(issue 10 items 3 and 4): the second run fails at once naming the holder, nothing is lost or
truncated, a killed run resumes bitwise, and no process of a killed job survives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from faults import TINY, Run, cli, error_line, metric_steps, spawn, wait_for_rows
from safetensors.torch import load_file

from ampkit.checkpoint.folder import find_checkpoints

pytestmark = pytest.mark.timeout(600)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False


def descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def test_a_second_run_on_a_live_folder_fails_at_once_and_loses_nothing(tmp_path):
    out = tmp_path / "run"
    live = spawn("train", *TINY, "--steps", "100000", "--checkpoint-every", "3", "--out", str(out))
    try:
        wait_for_rows(out, 4, live)
        rows = metric_steps(out)
        for extra in (["--overwrite"], ["--resume", "auto"]):
            result = cli("train", *TINY, "--out", str(out), *extra)
            assert result.code == 1
            assert f"is in use by another ampkit run (PID {live.pid})" in error_line(result)
        assert metric_steps(out)[: len(rows)] == rows  # not truncated, not interleaved
    finally:
        live.kill()
        live.communicate()
    done = metric_steps(out)
    last = find_checkpoints(out / "checkpoints")[-1].step
    resumed = cli("train", *TINY, "--out", str(out), "--resume", "auto", "--steps", str(last + 2))
    assert resumed.code == 0, resumed
    assert metric_steps(out) == list(range(1, last + 3))
    assert done[:last] == list(range(1, last + 1))


KILL_DURING_WRITE = """
import os, signal, sys
from ampkit.checkpoint import folder as checkpoint_folder
real = checkpoint_folder._write_state  # how the checkpoint folder writes state.pt
def dying_write(path, state):
    if "step-00000004" in str(path) and path.name == "state.pt":
        data = state if isinstance(state, bytes) else checkpoint_folder.serialise_state(state)
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, state)
checkpoint_folder._write_state = dying_write
from ampkit.cli import main
main(sys.argv[1:])
"""


def test_sigkill_during_a_checkpoint_write_then_resume_is_bitwise_equal(tmp_path):
    args = ["train", *TINY, "--steps", "6", "--checkpoint-every", "2"]
    assert cli(*args, "--out", str(tmp_path / "straight")).code == 0
    out = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    killed = subprocess.run(
        [sys.executable, "-c", KILL_DURING_WRITE, *args, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if ".tmp-" not in p.name) == [
        "step-00000002"
    ]
    resumed = cli(*args, "--out", str(out), "--resume", "auto")
    assert resumed.code == 0, resumed
    straight, final = (load_file(d / "model.safetensors") for d in (tmp_path / "straight", out))
    assert all(torch.equal(final[k], straight[k]) for k in straight)
    assert metric_steps(out) == [1, 2, 3, 4, 5, 6]


def launch_job(out: Path) -> tuple[subprocess.Popen, set[int]]:
    """An ``--nproc 2`` job, once both workers train; its launcher and every descendant."""
    job = spawn("train", *TINY, "--steps", "100000", "--nproc", "2", "--out", str(out))
    wait_for_rows(out, 2, job)
    tree = descendants(job.pid)
    assert len(tree) >= 3, tree  # the torchrun agent and two workers
    return job, tree


def wait_gone(pids: set[int], timeout: float = 60) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if alive(p)}


@pytest.mark.slow
@pytest.mark.distributed
def test_sigkill_of_the_nproc_launcher_leaves_no_orphan(tmp_path):
    job, tree = launch_job(tmp_path / "run")
    try:
        job.kill()
        job.communicate()
        assert wait_gone(tree) == set(), "orphans kept running"
    finally:
        for pid in tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.distributed
def test_sigterm_of_the_nproc_launcher_stops_the_job_with_one_line(tmp_path):
    job, tree = launch_job(tmp_path / "run")
    try:
        job.send_signal(signal.SIGTERM)
        stdout, stderr = job.communicate(timeout=120)
        assert job.returncode == 128 + signal.SIGTERM
        assert "stopped by SIGTERM" in error_line(Run(job.returncode, stdout, stderr))
        assert wait_gone(tree) == set()
    finally:
        for pid in tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

"""``ampkit train`` stopped by a signal or killed (issue 21): SIGTERM finishes the step, writes
a checkpoint, says so in one line and exits 143, and ``--resume auto`` then ends bitwise
equal to an uninterrupted run; a run killed before its first checkpoint committed resumes as
a fresh start; under ``--nproc 2`` the same, and a killed worker is named in one line."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from faults import TINY, Run, error_line, metric_steps, run, spawn, wait_for_rows
from safetensors.torch import load_file

pytestmark = pytest.mark.timeout(600)

STEPS = ["--steps", "60", "--log-every", "1"]


def same_weights(a: Path, b: Path) -> bool:
    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def stop(child: subprocess.Popen, sig: int = signal.SIGTERM) -> Run:
    child.send_signal(sig)
    stdout, stderr = child.communicate(timeout=240)
    return Run(child.returncode, stdout, stderr)


@pytest.mark.slow
def test_sigterm_mid_run_then_resume_auto_is_bitwise_equal(tmp_path):
    args = ["train", *TINY, *STEPS, "--checkpoint-every", "1000"]
    # every run in a child with the same thread count (spawn's), so sums reduce alike
    assert run(*args, "--out", str(tmp_path / "straight")).code == 0
    out = tmp_path / "stopped"
    child = spawn(*args, "--out", str(out))
    wait_for_rows(out, 3, child)
    stopped = stop(child)
    assert stopped.code == 128 + signal.SIGTERM
    line = error_line(stopped)
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert len(checkpoints) == 1 and ".tmp-" not in checkpoints[0]  # the stop's own checkpoint
    step = int(checkpoints[0].split("-")[1])
    assert line == (
        f"ampkit: error: stopped by SIGTERM at step {step}; checkpoint written to "
        f"{out / 'checkpoints' / checkpoints[0]}; continue with --resume auto."
    )
    assert 3 <= step < 60
    resumed = run(*args, "--out", str(out), "--resume", "auto")
    assert resumed.code == 0, resumed
    assert same_weights(tmp_path / "straight", out)
    assert metric_steps(out) == list(range(1, 61))


@pytest.mark.slow
def test_sighup_mid_run_leaves_no_temporary_folder(tmp_path):
    out = tmp_path / "run"
    child = spawn("train", *TINY, *STEPS, "--checkpoint-every", "1000", "--out", str(out))
    wait_for_rows(out, 2, child)
    stopped = stop(child, signal.SIGHUP)
    assert stopped.code == 128 + signal.SIGHUP
    assert "stopped by SIGHUP" in error_line(stopped)
    assert not [p for p in (out / "checkpoints").iterdir() if ".tmp-" in p.name]


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_resumes_fresh(tmp_path):
    out = tmp_path / "run"
    args = ["train", *TINY, "--checkpoint-every", "1000", "--out", str(out)]
    child = spawn(*args, "--steps", "100000")  # never reaches a checkpoint
    wait_for_rows(out, 1, child)
    child.kill()  # SIGKILL: no handler runs, nothing was committed
    child.communicate()
    assert not (out / "checkpoints").exists() or not [
        p for p in (out / "checkpoints").iterdir() if ".tmp-" not in p.name
    ]
    lost_rows = (out / "metrics.jsonl").read_text()
    resumed = run(*args, "--resume", "auto")
    assert resumed.code == 0, resumed
    kept = [p for p in out.iterdir() if p.name.startswith("metrics.lost-")]
    assert len(kept) == 1 and kept[0].read_text() == lost_rows
    assert (
        f"committed no checkpoint, so this one starts fresh; its metrics.jsonl was kept as "
        f"{kept[0].name}" in resumed.stdout
    )
    assert metric_steps(out) == [1, 2, 3, 4]
    straight = tmp_path / "straight"
    assert run("train", *TINY, "--out", str(straight)).code == 0
    assert same_weights(straight, out)


@pytest.mark.slow
@pytest.mark.distributed
def test_nproc_sigterm_then_resume_auto_is_bitwise_equal(tmp_path):
    # 200 steps of a few ms: the SIGTERM passes the launcher, torchrun and both workers
    # before the run could end on its own, also on a fast machine
    args = ["train", *TINY, "--steps", "200", "--log-every", "1", "--nproc", "2"]
    args += ["--checkpoint-every", "1000"]
    assert run(*args, "--out", str(tmp_path / "straight")).code == 0  # its own sys.argv
    out = tmp_path / "stopped"
    child = spawn(*args, "--out", str(out))
    wait_for_rows(out, 2, child)
    stopped = stop(child)
    assert stopped.code == 128 + signal.SIGTERM
    line = error_line(stopped)
    assert line.startswith("ampkit: error: stopped by SIGTERM at step ")
    assert line.endswith("; continue with --resume auto.")
    step = int(line.split("at step ")[1].split(";")[0])
    assert [p.name for p in (out / "checkpoints").iterdir()] == [f"step-{step:08d}"]
    resumed = run(*args, "--out", str(out), "--resume", "auto")
    assert resumed.code == 0, resumed
    assert same_weights(tmp_path / "straight", out)


def worker_pid(launcher: int, rank: int) -> int:
    """The PID of the ``--nproc`` worker of ``rank`` under ``launcher``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"AMPKIT_LAUNCHER_PID={launcher}".encode() in environ and (
            f"RANK={rank}".encode() in environ and b"LOCAL_RANK=" + str(rank).encode() in environ
        ):
            return int(entry.name)
    raise AssertionError(f"no worker of rank {rank}")


@pytest.mark.slow
@pytest.mark.distributed
def test_a_killed_worker_is_named_in_one_line_with_its_signal(tmp_path):
    out = tmp_path / "run"
    child = spawn("train", *TINY, "--steps", "100000", "--nproc", "2", "--out", str(out))
    wait_for_rows(out, 3, child)
    os.kill(worker_pid(child.pid, 1), signal.SIGKILL)
    stdout, stderr = child.communicate(timeout=240)
    result = Run(child.returncode, stdout, stderr)
    assert result.code == 128 + signal.SIGKILL
    line = error_line(result)  # one line: no transport traceback from rank 0
    assert line.startswith("ampkit: error: --nproc: rank 1 (PID ")
    assert "failed first: it was killed by SIGKILL" in line

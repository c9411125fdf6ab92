"""``ampkit train --nproc 2`` (torchrun, gloo on loopback): DDP and FSDP2 against one process,
and resume after SIGKILL under DDP. Every subprocess has a hard timeout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(600)]

COMMON = [
    "--precision",
    "fp32",
    "--seq-len",
    "32",
    "--log-every",
    "1",
    "--no-progress",
    "--max-grad-norm",
    "0",
    "--lr",
    "1e-3",
]


def ampkit_train(out: Path, *args: str, wait: bool = True):
    command = [sys.executable, "-m", "ampkit", "train", "--out", str(out), *COMMON, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if not wait:
        return subprocess.Popen(
            command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _session(sid: int) -> list[int]:
    """The processes of session ``sid`` (the launcher started with ``start_new_session``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # state, ppid, pgrp, session
                found.append(int(entry.name))
    return found


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model.safetensors")


def test_two_ddp_processes_see_the_global_batch_of_one(tmp_path):
    ampkit_train(tmp_path / "one", "--steps", "6", "--batch-size", "8")
    two = ampkit_train(tmp_path / "two", "--steps", "6", "--batch-size", "4", "--nproc", "2")
    assert "processes  2" in two.stdout
    single, ddp = weights(tmp_path / "one"), weights(tmp_path / "two")
    # rtol=1e-5 with torch's fp32 default atol (1e-5): the key biases have a true gradient of
    # zero (softmax ignores a shift shared by all keys), so AdamW turns rounding noise of the
    # two summation orders into updates of ~1e-6 there; every other weight agrees to ~1e-7.
    for name, tensor in single.items():
        torch.testing.assert_close(ddp[name], tensor, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("strategy", ["fsdp", "hsdp"])
def test_fsdp2_matches_one_process(tmp_path, strategy):
    # hsdp on one node: one shard group of both processes, i.e. FSDP2 over a 1 x 2 mesh
    ampkit_train(tmp_path / "one", "--steps", "4", "--batch-size", "8")
    ampkit_train(
        tmp_path / "fsdp",
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--nproc",
        "2",
        "--strategy",
        strategy,
        "--checkpoint-every",
        "2",
    )
    single, sharded = weights(tmp_path / "one"), weights(tmp_path / "fsdp")
    for name, tensor in single.items():
        torch.testing.assert_close(sharded[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    assert (tmp_path / "fsdp" / "checkpoints" / "step-00000004" / "COMPLETE").exists()


def test_ddp_resume_after_sigkill_is_bitwise_equal(tmp_path):
    # 60 steps: a step takes a few ms here, so a shorter run can finish between the poll that
    # sees row 7 and the kill
    args = ["--steps", "60", "--batch-size", "4", "--nproc", "2", "--checkpoint-every", "3"]
    ampkit_train(tmp_path / "straight", *args)
    run = tmp_path / "killed"
    process = ampkit_train(run, *args, wait=False)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        rows = metrics.read_text().splitlines() if metrics.exists() else []
        if len(rows) >= 7:
            break
        if process.poll() is not None:
            pytest.fail("the run ended before it could be killed")
        time.sleep(0.05)
    # the launcher, the torchrun agent and both workers, at once, mid-run. (Killing only the
    # launcher's process group would reach the agent as SIGTERM, its own group, and the
    # workers would stop gracefully, or, a moment late, finish the run.)
    for pid in _session(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=30)
    resumed = ampkit_train(run, *args, "--resume", "auto")
    assert "resumed from" in resumed.stdout
    straight, final = weights(tmp_path / "straight"), weights(run)
    for name, tensor in straight.items():
        assert torch.equal(final[name], tensor), name
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(1, 61))  # rows after the checkpoint were replaced, not doubled

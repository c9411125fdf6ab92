"""Exact resume: a run killed with SIGKILL at any moment, then resumed, ends bitwise equal."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("resume_worker.py")

pytestmark = pytest.mark.timeout(300)


def run_worker(tmp: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(WORKER), str(tmp / "ckpt"), str(tmp / f"{name}.safetensors"), *extra],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, torch.Tensor]:
    tmp = tmp_path_factory.mktemp("straight")
    result = run_worker(tmp, "final")
    assert result.returncode == 0, result.stderr
    return load_file(tmp / "final.safetensors")


def kill_then_resume(tmp_path: Path, uninterrupted, mode: str, *layout: str) -> None:
    killed = run_worker(tmp_path, "final", "--kill", mode, *layout)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (tmp_path / "final.safetensors").exists()
    steps = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    complete = [s for s in steps if ".tmp-" not in s]
    assert complete[-1] == "step-00000006"  # the killed write of step 9 never became visible
    resumed = run_worker(tmp_path, "final", *layout)
    assert resumed.returncode == 0, resumed.stderr
    final = load_file(tmp_path / "final.safetensors")
    for name, tensor in uninterrupted.items():
        assert torch.equal(final[name], tensor), name


@pytest.mark.parametrize("mode", ["between", "during-write", "before-rename"])
def test_kill_then_resume_is_bitwise_equal(tmp_path, uninterrupted, mode):
    kill_then_resume(tmp_path, uninterrupted, mode)


def test_sharded_layout_killed_while_writing_resumes_bitwise_equal(tmp_path, uninterrupted):
    # DCP's shards are on disk, state.pt half written: the folder never becomes a checkpoint
    # (the rename is the commit_checkpoint code that the full layout's tests cover too)
    kill_then_resume(tmp_path, uninterrupted, "during-write", "--layout", "sharded")
    assert (tmp_path / "ckpt" / "step-00000012" / "dcp" / ".metadata").is_file()


def test_corrupt_newest_checkpoint_falls_back_to_previous(tmp_path, uninterrupted):
    assert run_worker(tmp_path, "first", "--kill", "between").returncode == -signal.SIGKILL
    newest = tmp_path / "ckpt" / "step-00000006" / "model.safetensors"
    data = bytearray(newest.read_bytes())
    data[-10] ^= 0xFF
    newest.write_bytes(bytes(data))
    resumed = run_worker(tmp_path, "final")
    assert resumed.returncode == 0, resumed.stderr
    final = load_file(tmp_path / "final.safetensors")
    for name, tensor in uninterrupted.items():
        assert torch.equal(final[name], tensor), name

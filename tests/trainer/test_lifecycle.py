"""The Trainer's process group under torchrun: kept after ``fit()``, released by ``close()``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ampkit.checkpoint.folder import read_weights, verify_checkpoint

WORKER = Path(__file__).with_name("lifecycle_worker.py")

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]


def test_save_checkpoint_after_fit_works_under_torchrun_and_close_releases_the_group(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(WORKER), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Default process group has not been initialized" not in done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["joined_at_construction"] is False  # joined on first need, not in __init__
    assert report["initialized_after_fit"] is True  # fit() does not release it
    assert report["eval_loss"] > 0 and report["repeat_save"] is None
    assert report["owned"] is True
    assert report["initialized_after_close"] is False  # close() released the group it joined
    assert report["initialized_after_with"] is False  # and so did the with block
    assert report["world_size"] == 2

    saved = Path(report["saved"])
    assert saved == tmp_path / "b" / "step-00000004"
    manifest = verify_checkpoint(saved)
    assert manifest["world_size"] == 2 and manifest["step"] == 4
    original = read_weights(tmp_path / "a" / "step-00000004").tensors
    copy = read_weights(saved).tensors
    assert original.keys() == copy.keys()
    assert all(torch.equal(original[k], copy[k]) for k in original)

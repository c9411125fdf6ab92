"""Processes that do not share the checkpoint folder (node-local disks): found before any step.

A sharded checkpoint is written by every rank into the folder rank 0 commits, so without shared
storage it would be committed without the other ranks' shards; the full layout is written by
rank 0 alone and goes on, saying that it cannot be resumed there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ampkit.trainer.checkpointing.resume import unshared_ranks
from ampkit.trainer.distributed import DistContext

WORKER = Path(__file__).with_name("unshared_worker.py")

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


def launch(out: Path, layout: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(WORKER), str(out), layout]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"outcome{rank}.json").read_text()) for rank in (0, 1)]


def test_sharded_checkpoints_into_a_folder_not_every_rank_sees_are_refused_before_any_step(
    tmp_path,
):
    outcomes = launch(tmp_path, "sharded")
    for rank, outcome in enumerate(outcomes):
        assert outcome["fit"] == "CheckpointError", (rank, outcome)
        assert outcome["step"] == 0, outcome  # before any step
        assert (
            "rank 1 does not see the checkpoint folder ckpt that rank 0 sees"
            in (outcome["message"])
        ), outcome
        assert "storage every node shares" in outcome["message"]
    for rank in (0, 1):  # nothing written, and rank 0's probe file is gone
        assert list((tmp_path / f"rank{rank}" / "ckpt").glob("*")) == [], rank


def test_full_checkpoints_go_on_from_rank0_and_say_they_cannot_be_resumed_there(tmp_path):
    outcomes = launch(tmp_path, "full")
    for outcome in outcomes:
        assert outcome["fit"] == "trained" and outcome["steps"] == 4, outcome
    (note,) = [n for n in outcomes[0]["notes"] if "does not see the checkpoint folder" in n]
    assert note.startswith("checkpoint: rank 1 does not see") and "written by rank 0 alone" in note
    names = sorted(p.name for p in (tmp_path / "rank0" / "ckpt").iterdir())
    assert names == ["step-00000002", "step-00000004"]
    assert not (tmp_path / "rank1" / "ckpt").exists() or not any(
        (tmp_path / "rank1" / "ckpt").iterdir()
    )


def test_one_process_needs_no_probe(tmp_path):
    assert unshared_ranks(DistContext(), tmp_path / "ckpt") == []
    assert not (tmp_path / "ckpt").exists()  # nothing written

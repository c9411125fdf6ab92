"""Ranks agree (issue 21): rank 0 picks the checkpoint to resume and every rank checks it;
two processes that see different checkpoint folders fail fast, alike, in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from ampkit import CheckpointConfig, Trainer
from ampkit.errors import RanksDisagreeError
from ampkit.trainer.checkpointing.resume import choose_resume_checkpoint
from ampkit.trainer.distributed import DistContext, agree_on_end, ranks_listed

# Each rank writes its lines in one write(): print() writes the text and the newline apart, so
# the two ranks' lines could interleave on the shared stderr pipe.
WORKER = """
import os, sys, torch
from torch import nn
from ampkit import CheckpointConfig, DistributedConfig, RanksDisagreeError, Trainer
rank = int(os.environ["RANK"])
torch.manual_seed(0)
model = nn.Linear(4, 1)
data = [(torch.randn(4, 4), torch.randn(4, 1)) for _ in range(8)]
trainer = Trainer(
    model, torch.optim.SGD(model.parameters(), lr=0.1), max_steps=6,
    loss_fn=nn.functional.mse_loss, precision="fp32", device="cpu",
    checkpoint=CheckpointConfig(os.path.join(sys.argv[1], f"ckpt{rank}"), every=2, resume="auto"),
    distributed=DistributedConfig(timeout_s=60),
)
from ampkit.trainer.distributed import agree_on_end
try:  # the end agreement: the ranks claim different last steps
    agree_on_end(trainer.dist, 3 + rank)
except RanksDisagreeError as exc:
    sys.stderr.write(f"end {rank}: {exc}\\n")
try:
    with trainer:
        trainer.fit(data)
except RanksDisagreeError as exc:
    sys.stderr.write(f"rank {rank}: {exc}\\n")
    sys.exit(3)
sys.stderr.write(f"rank {rank}: trained\\n")
"""


def _single_process_checkpoint(root):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    data = [(torch.randn(4, 4), torch.randn(4, 1)) for _ in range(8)]
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        max_steps=2,
        loss_fn=nn.functional.mse_loss,
        precision="fp32",
        device="cpu",
        checkpoint=CheckpointConfig(root, every=2),
    )
    trainer.fit(data)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_ranks_that_see_different_checkpoint_folders_fail_fast_in_one_line(tmp_path):
    _single_process_checkpoint(tmp_path / "ckpt0")  # rank 0 sees step 2; rank 1 sees nothing
    (tmp_path / "ckpt1").mkdir()
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(worker), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    lines = [line for line in done.stderr.splitlines() if line.startswith("rank ")]
    assert done.returncode != 0, done.stderr[-3000:]
    assert sorted(line.split(":")[0] for line in lines) == ["rank 0", "rank 1"], done.stderr
    said = {line.split(": ", 1)[1] for line in lines}
    assert len(said) == 1  # every rank raises the same error
    message = said.pop()
    assert "rank 0 resumes" in message and "step-00000002" in message
    assert f"rank 1 sees no checkpoint in {tmp_path / 'ckpt1'}" in message
    assert "trained" not in done.stderr
    ends = {line.split(": ", 1)[1] for line in done.stderr.splitlines() if line.startswith("end ")}
    assert len(ends) == 1 and "rank 0 at step 3; rank 1 at step 4" in ends.pop(), done.stderr
    # fast, without timing it: the agreement check's message ends the run, not the 60 s
    # collective timeout the worker sets (a timed-out collective says so instead)
    assert "timed out" not in done.stderr.lower(), done.stderr[-3000:]
    assert not (tmp_path / "ckpt1" / "step-00000004").exists()


def test_one_process_chooses_as_find_resume_checkpoint(tmp_path):
    _single_process_checkpoint(tmp_path / "ckpt")
    path, notes = choose_resume_checkpoint(DistContext(), tmp_path / "ckpt", "auto")
    assert path == tmp_path / "ckpt" / "step-00000002" and notes == []
    assert choose_resume_checkpoint(DistContext(), tmp_path / "none", "auto")[0] is None


def test_agree_on_end_in_one_process_and_rank_lists():
    agree_on_end(DistContext(), 5)  # one process always agrees with itself
    assert ranks_listed([1]) == "rank 1"
    assert ranks_listed([1, 3]) == "ranks 1, 3"
    assert ranks_listed(list(range(1, 8))) == "ranks 1, 2, 3, 4 and 3 more"
    assert issubclass(RanksDisagreeError, RuntimeError)

"""HSDP (FSDP2 over a 2-D mesh), activation checkpointing and CPU offload under FSDP2, and a
model the caller sharded over a 2-D mesh itself, with 4 gloo processes (one torchrun launch,
hsdp_worker.py); the resharding parts (4 -> 1 process) run here.

Expectations: a 1 x 4 HSDP mesh is FSDP2 over 4 processes, so bitwise equal to it; a 2 x 2
mesh reduces the gradients in another order (shard groups, then replicas), so equal within
fp32 rounding; activation checkpointing (with dropout) and CPU offload on a CPU change no
arithmetic, so bitwise; a resumed run is bitwise equal to the uninterrupted one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from hsdp_worker import BATCH, STEPS, Net, dataset, make_trainer
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import get_state_dict

from ampkit.checkpoint.folder import read_weights

WORKER = Path(__file__).with_name("hsdp_worker.py")
WORLD = 4

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hsdp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={WORLD}", str(WORKER), str(out), str(plain_dcp(out))]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def plain_dcp(out: Path) -> Path:
    """A 1-process DCP checkpoint that ampkit did not write: the Net after one AdamW step."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = dataset()[:BATCH]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    model_state, optim_state = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP's note that no process group exists
        dcp.save(
            {"model": model_state, "optim": optim_state},
            checkpoint_id=str(out / "plain"),
            no_dist=True,
        )
    torch.save(dict(model.state_dict()), out / "plain.pt")
    return out / "plain"


def weights(runs: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(runs / f"{name}.safetensors")


def assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name


def test_hsdp_default_mesh_is_fsdp_bitwise_and_resumes_bitwise(runs):
    fsdp = weights(runs, "fsdp")
    assert_equal(weights(runs, "hsdp"), fsdp)  # one node: 1 x 4, all processes shard
    assert_equal(weights(runs, "hsdp-resumed"), weights(runs, "hsdp"))
    notes = json.loads((runs / "notes.json").read_text())
    assert any("resumed from" in n and "step 3" in n for n in notes["hsdp-resumed"]["notes"])
    manifest = json.loads((runs / "hsdp/ckpt/step-00000003/manifest.json").read_text())
    assert manifest["layout"] == "sharded" and manifest["world_size"] == WORLD


def test_hsdp_two_by_two_equals_fsdp_within_rounding(runs):
    fsdp, hsdp = weights(runs, "fsdp"), weights(runs, "hsdp-2d")
    for name, tensor in fsdp.items():
        torch.testing.assert_close(hsdp[name], tensor, rtol=1e-5, atol=1e-6)
    assert not torch.equal(
        fsdp["out.weight"], read_weights(runs / "fsdp/ckpt/step-00000003").tensors["out.weight"]
    )


def test_activation_checkpointing_and_cpu_offload_under_fsdp_are_bitwise(runs):
    fsdp = weights(runs, "fsdp")
    assert_equal(weights(runs, "fsdp-ac"), fsdp)
    assert_equal(weights(runs, "fsdp-offload"), fsdp)
    # and resume: offloaded from offloaded, checkpointed from a run without it
    assert_equal(weights(runs, "fsdp-offload-resumed"), fsdp)
    assert_equal(weights(runs, "fsdp-ac-resumed"), fsdp)


def test_user_built_2d_mesh_writes_final_weights_and_sharded_checkpoints(runs):
    # the model the caller sharded over a 2 x 2 mesh (strategy="none") trains as HSDP does,
    # and its final weights and checkpoints are written from the DTensors, gathered
    assert_equal(weights(runs, "user-mesh"), weights(runs, "hsdp-2d"))
    assert_equal(weights(runs, "user-mesh-fsdp"), weights(runs, "hsdp-2d"))  # not sharded twice
    notes = json.loads((runs / "notes.json").read_text())
    assert notes["user-mesh"]["strategy"] == "fsdp"
    assert not notes["user-mesh"]["notes"]  # strategy="none": nothing to say
    assert any("already sharded with fully_shard" in n for n in notes["user-mesh-fsdp"]["notes"])
    assert_equal(
        read_weights(runs / "user-mesh/ckpt/step-00000006").tensors, weights(runs, "user-mesh")
    )


def test_hsdp_checkpoint_resumes_on_one_process(runs, tmp_path):
    step3 = runs / "hsdp-2d/ckpt/step-00000003"
    # resumed at its own last step: nothing trains, so the final weights are the checkpoint's
    trainer = make_trainer(tmp_path, "loaded", WORLD * BATCH, resume=step3, max_steps=3)
    notes = trainer.fit(dataset()).notes
    assert any(f"resumed a {WORLD}-process checkpoint on 1 process" in n for n in notes), notes
    assert_equal(weights(tmp_path, "loaded"), read_weights(step3).tensors)
    # and trains on from it, optimizer state included (a fresh AdamW's first step differs)
    trainer = make_trainer(tmp_path, "continued", WORLD * BATCH, resume=step3)
    trainer.fit(dataset())
    assert trainer.step == STEPS
    state = trainer.optimizer.state_dict()["state"]
    assert all(int(s["step"]) == STEPS for s in state.values())


def test_hsdp_resumes_a_plain_dcp_checkpoint_written_by_one_process(runs):
    notes = json.loads((runs / "notes.json").read_text())["hsdp-plain"]["notes"]
    assert any("loaded the model weights and the optimizer state" in n for n in notes), notes
    # resharded 1 -> 4: its first checkpoint starts from the plain one's weights, not fresh
    saved = torch.load(runs / "plain.pt")
    first = read_weights(runs / "hsdp-plain/ckpt/step-00000003").tensors
    fresh = read_weights(runs / "hsdp/ckpt/step-00000003").tensors
    assert not torch.equal(first["out.weight"], fresh["out.weight"])
    assert first.keys() == saved.keys()

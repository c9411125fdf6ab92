"""Sharded checkpoints (torch.distributed.checkpoint) under FSDP2 with 2 gloo processes: bitwise
resume, asynchronous save, resharding 2 -> 1 and 1 -> 2, rank 0's memory while saving, and the
offline export. Every 2-process part runs in one torchrun launch (sharded_worker.py); the
1-process parts run here."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from sharded_worker import BATCH, run

from ampkit import CheckpointError
from ampkit.checkpoint import sharded
from ampkit.checkpoint._digest import READ_BLOCK
from ampkit.checkpoint.folder import (
    begin_checkpoint,
    commit_checkpoint,
    read_weights,
    verify_checkpoint,
)
from ampkit.checkpoint.manifest import seal
from ampkit.cli import main

WORKER = Path(__file__).with_name("sharded_worker.py")

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded")
    run(out, "one", batch_size=2 * BATCH, layout="sharded")  # 1 process, here
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(WORKER), str(out), str(out / "one/ckpt/step-00000003")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(path)


def assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name


def test_fsdp2_sharded_save_then_resume_is_bitwise(runs):
    straight = weights(runs / "straight.safetensors")
    for name in ("resumed", "async"):
        assert_equal(weights(runs / f"{name}.safetensors"), straight)
    for step in ("step-00000003", "step-00000006"):  # staged when saved, not when written
        written_async = read_weights(runs / "async/ckpt" / step).tensors
        assert_equal(written_async, read_weights(runs / "straight/ckpt" / step).tensors)
    manifest = json.loads((runs / "straight/ckpt/step-00000003/manifest.json").read_text())
    assert manifest["layout"] == "sharded" and manifest["world_size"] == 2
    assert manifest["samples_consumed"] == 3 * 2 * BATCH
    assert {"dcp/__0_0.distcp", "dcp/__1_0.distcp", "dcp/.metadata", "state.pt"} == set(
        manifest["files"]
    )
    for name in ("straight", "async"):  # the asynchronous run committed both checkpoints
        assert sorted(p.name for p in (runs / name / "ckpt").iterdir()) == [
            "step-00000003",
            "step-00000006",
        ]


def test_each_rank_hashes_its_own_shards_so_rank0_reads_back_only_the_index(runs):
    hashed = json.loads((runs / "hashed_at_commit.json").read_text())
    assert hashed == [".metadata", ".metadata"], hashed  # two checkpoints, no .distcp file
    for step in ("step-00000003", "step-00000006"):
        verify_checkpoint(runs / "straight/ckpt" / step)  # the gathered digests are right


def test_checkpoint_verify_checks_every_two_process_sharded_checkpoint(runs):
    result = CliRunner().invoke(main, ["checkpoint", "verify", str(runs / "straight" / "ckpt")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for line, step in zip(lines, ("step-00000003", "step-00000006"), strict=False):
        assert line.startswith(f"ok       {step}  sharded, 4 files"), line
        assert "BLAKE3 verified" in line
    assert lines[-1] == "--resume auto takes: step-00000006"


def test_two_process_checkpoint_resumes_on_one_process(runs, tmp_path):
    notes = run(
        tmp_path, "two-to-one", batch_size=2 * BATCH, resume=runs / "straight/ckpt/step-00000003"
    )
    assert any("resumed a 2-process checkpoint on 1 process" in note for note in notes), notes
    assert any(f"{3 * 2 * BATCH} samples consumed" in note for note in notes), notes
    resumed, straight = (
        weights(tmp_path / "two-to-one.safetensors"),
        weights(runs / "straight.safetensors"),
    )
    for name, tensor in straight.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_one_process_checkpoint_resumes_on_two(runs):
    notes = json.loads((runs / "notes.json").read_text())["from-one"]
    assert any(
        "resumed a 1-process checkpoint on 2 process" in n and "re-seeded" in n for n in notes
    )
    one, resumed = weights(runs / "one.safetensors"), weights(runs / "from-one.safetensors")
    for name, tensor in one.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_rank0_memory_while_saving_does_not_grow_with_the_model(runs):
    small, large, full = json.loads((runs / "memory.json").read_text())
    print(f"\nrank 0 extra RSS while saving: {small}, {large}, {full}")
    assert large["model_mib"] > 1.9 * small["model_mib"]
    # sharded: rank 0 writes its own shards; no copy of the model (or of the optimizer)
    # appears, only the one fixed-size buffer the shards are read through to be hashed
    buffer_mib = READ_BLOCK / 2**20
    assert large["extra_rss_mib"] < 0.25 * large["model_mib"] + buffer_mib
    growth = large["extra_rss_mib"] - small["extra_rss_mib"]
    assert growth < 0.1 * (large["model_mib"] - small["model_mib"])
    # the full layout gathers weights and optimizer state on rank 0: the control
    assert full["extra_rss_mib"] > large["model_mib"]


def test_export_consolidates_a_sharded_checkpoint_and_refuses_a_damaged_one(runs, tmp_path):
    out = tmp_path / "model.safetensors"
    result = CliRunner().invoke(
        main, ["checkpoint", "export", str(runs / "straight/ckpt"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "step-00000006" in result.output
    assert_equal(weights(out), weights(runs / "straight.safetensors"))
    damaged = shutil.copytree(runs / "straight/ckpt/step-00000003", tmp_path / "step-00000003")
    shard = damaged / "dcp" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    result = CliRunner().invoke(
        main, ["checkpoint", "export", str(damaged), "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 1 and "__1_0.distcp is corrupt" in result.output
    assert not (tmp_path / "x").exists()


class _RunsCode:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_a_dcp_index_that_would_run_code_is_refused(tmp_path):
    tmp = begin_checkpoint(tmp_path, 1)
    sharded.save({sharded.MODEL: {"w": torch.ones(3)}}, tmp / "dcp")
    path = commit_checkpoint(tmp, 1, {}, layout="sharded")
    assert torch.equal(read_weights(path).tensors["w"], torch.ones(3))
    index = path / "dcp" / ".metadata"
    index.write_bytes(pickle.dumps(_RunsCode(tmp_path / "ran")))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["dcp/.metadata"] = {
        "sha256": hashlib.sha256(index.read_bytes()).hexdigest(),
        "bytes": index.stat().st_size,
    }
    reseal(path, manifest)
    with pytest.raises(CheckpointError, match="not a readable DCP index"):
        read_weights(path)
    assert not (tmp_path / "ran").exists()


def test_async_checkpoint_is_committed_only_at_the_next_one_or_at_the_end(tmp_path):
    from ampkit import Callback
    from ampkit.checkpoint.folder import find_checkpoints

    seen = {}

    class Look(Callback):
        def on_step_end(self, trainer, result):
            if trainer.step == 5:  # step 3's write was started, nothing committed it yet
                ckpt = tmp_path / "async" / "ckpt"
                seen["complete"] = [c.step for c in find_checkpoints(ckpt)]
                seen["pending"] = sorted(p.name.split(".")[0] for p in ckpt.glob("*.tmp-*"))

    notes = run(tmp_path, "async", batch_size=2 * BATCH, async_save=True, callbacks=[Look()])
    assert seen == {"complete": [], "pending": ["step-00000003"]}, notes
    assert [c.step for c in find_checkpoints(tmp_path / "async" / "ckpt")] == [3, 6]
    assert list((tmp_path / "async" / "ckpt").glob("*.tmp-*")) == []


def reseal(path, manifest) -> None:
    """Write ``manifest`` and seal it in ``COMPLETE`` as a writer would (an attacker who
    recomputes every digest)."""
    text = json.dumps(manifest).encode()
    (path / "manifest.json").write_bytes(text)
    (path / "COMPLETE").write_bytes(seal(manifest["step"], text))

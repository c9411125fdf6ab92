"""The --out folder: locked, never silently overwritten, and resumable only where it makes sense."""

from __future__ import annotations

import os

import pytest
import torch

from ampkit import CheckpointError, ConfigurationError, RunInUseError, TrainConfig
from ampkit.checkpoint.folder import write_checkpoint
from ampkit.job.resume import run_record
from ampkit.job.run_folder import open_run_folder


def open_folder(config: TrainConfig, sha: str = "abc"):
    return open_run_folder(config, is_main=True, data_sha256=lambda: sha, precision="fp32")


def checkpoint(out, step: int, config: TrainConfig | None = None):
    record = run_record(config, "abc") if config else None
    metadata = {"precision": "fp32", "world_size": 1}
    if record:
        metadata["config"] = record
    return write_checkpoint(out / "checkpoints", step, {"w": torch.ones(2)}, {}, metadata)


def test_fresh_run_refuses_an_earlier_runs_outputs_without_overwrite(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(ConfigurationError, match=r"holds an earlier run \(summary.json, model"):
        with open_folder(TrainConfig(out=str(tmp_path))):
            pass
    assert (tmp_path / "summary.json").read_text() == "{}"  # nothing changed


def test_overwrite_replaces_the_earlier_run(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    checkpoint(tmp_path, 2)
    with open_folder(TrainConfig(out=str(tmp_path), overwrite=True)) as plan:
        assert plan.resume is None and "replaced the earlier run" in plan.notes[0]
    assert not (tmp_path / "metrics.jsonl").exists() and not (tmp_path / "checkpoints").exists()


def test_the_folder_is_locked_while_open(tmp_path):
    with open_folder(TrainConfig(out=str(tmp_path))):
        with pytest.raises(RunInUseError, match=f"PID {os.getpid()}"):
            with open_folder(TrainConfig(out=str(tmp_path / "."))):
                pass


def test_resume_auto_with_only_damaged_checkpoints_says_how_to_start_over(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 2}\n')
    path = checkpoint(tmp_path, 2)
    (path / "model.safetensors").write_bytes(b"damaged")
    with pytest.raises(CheckpointError) as caught:
        with open_folder(TrainConfig(out=str(tmp_path), resume="auto")):
            pass
    message = str(caught.value)
    assert "holds no valid checkpoint (1 damaged" in message
    assert "--overwrite instead of --resume" in message


def test_resume_auto_takes_the_newest_valid_checkpoint_and_compares_settings(tmp_path):
    config = TrainConfig(out=str(tmp_path), resume="auto", seed=3)
    checkpoint(tmp_path, 2, config)
    with open_folder(config) as plan:
        assert plan.resume.endswith("step-00000002") and plan.saved_lr is None
    with pytest.raises(ConfigurationError, match=r"--seed 3 \(now 4\)"):
        with open_folder(TrainConfig(out=str(tmp_path), resume="auto", seed=4)):
            pass


def test_out_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="--out: cannot create the folder"):
        with open_folder(TrainConfig(out=str(tmp_path / "file" / "run"))):
            pass

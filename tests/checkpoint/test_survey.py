"""Every checkpoint of a run verified at once (``ampkit checkpoint verify``'s library call)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from click.testing import CliRunner

from ampkit.checkpoint import sharded
from ampkit.checkpoint.folder import (
    begin_checkpoint,
    commit_checkpoint,
    latest_valid_checkpoint,
    write_checkpoint,
)
from ampkit.checkpoint.survey import survey_checkpoints
from ampkit.cli import main
from ampkit.errors import ConfigurationError

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _run_folder(tmp_path, steps=(2, 4, 6)):
    root = tmp_path / "run" / "checkpoints"
    for step in steps:
        weights = {"w": torch.full((64, 64), float(step))}
        write_checkpoint(root, step, weights, {"optimizer": {"m": torch.ones(64)}, "step": step})
    return tmp_path / "run", root


def _flip(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def test_every_checkpoint_is_verified_and_the_one_resume_takes_is_named(tmp_path):
    run, root = _run_folder(tmp_path)
    _flip(root / "step-00000006" / "model.safetensors")
    (root / "step-00000008.tmp-99").mkdir()
    survey = survey_checkpoints(run)
    assert survey.root == root
    assert [c.step for c in survey.checks] == [2, 4, 6]
    assert [c.ok for c in survey.checks] == [True, True, False]
    assert "model.safetensors is corrupt" in str(survey.checks[2].problem)
    good = survey.checks[0]
    assert (good.layout, good.files, good.digest) == ("full", 2, "BLAKE3")
    on_disk = sum(
        p.stat().st_size for p in good.path.iterdir() if p.suffix in (".pt", ".safetensors")
    )
    assert good.bytes == on_disk
    assert [p.name for p in survey.incomplete] == ["step-00000008.tmp-99"]
    # the same choice as a resume: the newest that verifies
    assert survey.newest_valid.path == latest_valid_checkpoint(root)[0].path


def test_one_step_folder_and_a_checkpoints_folder_are_taken_as_they_are(tmp_path):
    run, root = _run_folder(tmp_path, steps=(3,))
    assert [c.step for c in survey_checkpoints(root / "step-00000003").checks] == [3]
    assert [c.step for c in survey_checkpoints(root).checks] == [3]


def test_nothing_to_verify_is_a_usage_error(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        survey_checkpoints(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="holds no checkpoint"):
        survey_checkpoints(tmp_path / "empty")


def test_a_plain_dcp_folder_is_checked_as_far_as_its_index_allows(tmp_path):
    plain = tmp_path / "step-1000"  # as torchtitan names them
    state = {sharded.MODEL: {"w": torch.ones(300), "b": torch.zeros(5)}}
    writer = dcp.FileSystemWriter(str(plain), thread_count=2)
    dcp.save(state, storage_writer=writer)  # one process: DCP saves without a group
    (check,) = survey_checkpoints(plain).checks
    assert check.ok and check.plain_files == 2 and check.manifest is None
    said = CliRunner().invoke(main, ["checkpoint", "verify", str(plain)])
    assert said.exit_code == 0 and "its 2 shard files are complete" in said.stdout, said.output
    shard = sorted(plain.glob("*.distcp"))[-1]
    shard.write_bytes(shard.read_bytes()[:-1])  # one byte short of what the index places
    (check,) = survey_checkpoints(plain).checks
    assert (
        not check.ok
        and f"{shard} holds" in str(check.problem)
        and "truncated" in str(check.problem)
    )
    shard.unlink()
    (check,) = survey_checkpoints(plain).checks
    assert f"{shard} is missing" in str(check.problem)
    said = CliRunner().invoke(main, ["checkpoint", "verify", str(plain)])
    assert said.exit_code == 1 and said.stdout.startswith("DAMAGED  step-1000")


def test_the_command_prints_a_line_per_checkpoint_and_exits_1_when_one_is_damaged(tmp_path):
    run, root = _run_folder(tmp_path)
    clean = CliRunner().invoke(main, ["checkpoint", "verify", str(run)])
    assert clean.exit_code == 0, clean.output
    lines = clean.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:3]] == [
        ["ok", f"step-0000000{s}"] for s in (2, 4, 6)
    ]
    assert "full, 2 files" in lines[0] and "BLAKE3 verified" in lines[0]
    assert lines[-1] == "--resume auto takes: step-00000006"
    _flip(root / "step-00000004" / "state.pt")
    damaged = CliRunner().invoke(main, ["checkpoint", "verify", str(run)])
    assert damaged.exit_code == 1
    assert damaged.stdout.splitlines()[1].startswith("DAMAGED  step-00000004  checkpoint: ")
    (error,) = damaged.stderr.splitlines()
    assert (
        error.startswith("ampkit: error: checkpoint: 1 of 3 checkpoints")
        and "step-00000004" in error
    )
    missing = CliRunner().invoke(main, ["checkpoint", "verify", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and missing.stdout == ""


def test_a_sharded_checkpoint_is_verified_with_its_index(tmp_path):
    tmp = begin_checkpoint(tmp_path / "ckpt", 5)
    sharded.save({sharded.MODEL: {"w": torch.ones(8)}}, tmp / "dcp")
    commit_checkpoint(tmp, 5, {"step": 5}, layout="sharded")
    (check,) = survey_checkpoints(tmp_path / "ckpt").checks
    assert check.ok and check.layout == "sharded" and check.files == 3

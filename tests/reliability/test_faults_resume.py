"""Resuming as a new user would (issue 22 items 8 and 9): re-running the README's resume line on
a finished run, settings carried over on resume, and finding a checkpoint (a missing folder,
several damaged checkpoints, a DCP index that would run code)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path

import torch
from faults import TINY, cli, error_line, metric_steps

from ampkit._lock import LOCK_NAME
from ampkit.checkpoint import sharded
from ampkit.checkpoint.folder import begin_checkpoint, commit_checkpoint, find_checkpoints
from ampkit.checkpoint.manifest import seal
from ampkit.trainer.checkpointing.resume import find_resume_checkpoint


def _without(args: list[str], *flags: str) -> list[str]:
    """``args`` without the given flags and their values."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        else:
            out.append(arg)
    return out


#: TINY without --steps and --log-every, so a resume can carry them over.
BASE = _without(TINY, "--steps", "--log-every")


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def steps_of(out: Path) -> list[int]:
    return [c.step for c in find_checkpoints(out / "checkpoints")]


def test_resuming_a_finished_run_says_so_and_rewrites_nothing(tmp_path):
    out = tmp_path / "a"
    line = ["train", *TINY, "--out", str(out), "--checkpoint-every", "2", "--resume", "auto"]
    first = cli(*line)
    assert first.code == 0, first
    before = digest(out)
    again = cli(*line)
    assert again.code == 0, again
    assert again.stdout.strip().splitlines() == [again.stdout.strip()]  # one line
    assert "already at step 4 of 4" in again.stdout and "nothing to do" in again.stdout
    assert again.stderr == ""
    assert digest(out) == before  # summary.json, metrics.jsonl, weights, checkpoints
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


def test_settings_not_given_again_are_carried_over_on_resume(tmp_path):
    out = tmp_path / "a"
    first = cli(
        "train", *BASE, "--out", str(out), "--steps", "3", "--log-every", "1",
        "--checkpoint-every", "1", "--keep-last", "2",
    )  # fmt: skip
    assert first.code == 0, first
    assert steps_of(out) == [2, 3]
    resumed = cli("train", *BASE, "--out", str(out), "--resume", "auto", "--steps", "6")
    assert resumed.code == 0, resumed
    assert steps_of(out) == [5, 6]  # --checkpoint-every 1 --keep-last 2 still hold
    assert metric_steps(out) == [1, 2, 3, 4, 5, 6]  # --log-every 1 too
    assert (
        "carried over from the checkpoint: --log-every 1, --checkpoint-every 1, --keep-last 2"
        in (resumed.stdout)
    )
    notes = json.loads((out / "summary.json").read_text())["notes"]
    assert any("carried over" in note and "--keep-last 2" in note for note in notes), notes
    given = cli(
        "train", *BASE, "--out", str(out), "--resume", "auto", "--steps", "8",
        "--keep-last", "3",
    )  # fmt: skip
    assert given.code == 0, given
    assert steps_of(out) == [6, 7, 8]  # a flag given again wins


def test_steps_are_carried_over_so_a_crashed_run_ends_where_it_was_meant_to(tmp_path):
    out = tmp_path / "a"
    first = cli("train", *TINY, "--out", str(out), "--checkpoint-every", "2")
    assert first.code == 0, first
    # as if killed after step 2's checkpoint: the later checkpoint and final outputs are gone
    for name in ("summary.json", "model.safetensors"):
        (out / name).unlink()
    newest = out / "checkpoints" / "step-00000004"
    for file in sorted(newest.rglob("*"), reverse=True):
        file.unlink() if file.is_file() else file.rmdir()
    newest.rmdir()
    resumed = cli("train", *BASE, "--out", str(out), "--resume", "auto")
    assert resumed.code == 0, resumed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["steps"] == 4 and steps_of(out) == [2, 4]


def test_export_of_a_missing_run_is_a_usage_error_naming_where_it_looked(tmp_path):
    missing = tmp_path / "runs" / "nonexistent"
    result = cli("checkpoint", "export", str(missing), "--out", str(tmp_path / "m.safetensors"))
    assert result.code == 2
    line = error_line(result)
    assert f"{missing} does not exist" in line
    assert f"{missing / 'checkpoints'}" in line and "step-NNNNNNNN" in line
    (tmp_path / "empty").mkdir()
    result = cli("checkpoint", "export", str(tmp_path / "empty"), "--out", str(tmp_path / "m"))
    assert result.code == 2 and "holds no checkpoint" in error_line(result)
    assert not (tmp_path / "m").exists() and not (tmp_path / "m.safetensors").exists()


def test_no_valid_checkpoint_lists_the_reason_of_every_damaged_one(tmp_path):
    out = tmp_path / "a"
    assert cli("train", *TINY, "--out", str(out), "--checkpoint-every", "2").code == 0
    ckpts = out / "checkpoints"
    state = ckpts / "step-00000002" / "state.pt"
    state.write_bytes(state.read_bytes()[:-7])  # truncated
    (ckpts / "step-00000004" / "model.safetensors").unlink()  # deleted
    before = digest(out)
    exported = cli("checkpoint", "export", str(out), "--out", str(tmp_path / "m.safetensors"))
    resumed = cli("train", *TINY, "--out", str(out), "--resume", "auto", "--steps", "6")
    for result in (exported, resumed):
        assert result.code == 1, result
        line = error_line(result)
        assert "2 damaged" in line
        assert "step-00000004/model.safetensors is missing" in line
        assert "step-00000002/state.pt is corrupt" in line
    assert digest(out) == before


class _RunsCode:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def _sharded_checkpoint(root: Path, step: int) -> Path:
    tmp = begin_checkpoint(root, step)
    sharded.save({sharded.MODEL: {"w": torch.full((3,), float(step))}}, tmp / "dcp")
    return commit_checkpoint(tmp, step, {}, layout="sharded")


def test_a_dcp_index_that_would_run_code_is_passed_over_by_resume_auto(tmp_path):
    root = tmp_path / "checkpoints"
    _sharded_checkpoint(root, 1)
    newest = _sharded_checkpoint(root, 2)
    index = newest / "dcp" / ".metadata"
    index.write_bytes(pickle.dumps(_RunsCode(tmp_path / "ran")))
    manifest = json.loads((newest / "manifest.json").read_text())
    manifest["files"]["dcp/.metadata"] = {  # an attacker fixes the manifest too
        "sha256": hashlib.sha256(index.read_bytes()).hexdigest(),
        "bytes": index.stat().st_size,
    }
    reseal(newest, manifest)
    path, notes = find_resume_checkpoint(root, "auto")
    assert path is not None and path.name == "step-00000001"
    assert len(notes) == 1 and "not a readable DCP index" in notes[0], notes
    exported = cli("checkpoint", "export", str(root), "--out", str(tmp_path / "m.safetensors"))
    assert exported.code == 0, exported
    assert "step-00000001" in exported.stdout and "not a readable DCP index" in exported.stderr
    assert not (tmp_path / "ran").exists()


def test_a_full_state_that_would_run_code_is_passed_over_by_resume_auto(tmp_path):
    """A ``state.pt`` pickle that would run code, its manifest hash fixed by an attacker:
    refused at verification (nothing runs), so ``resume="auto"`` takes the previous one."""
    import ampkit

    root = tmp_path / "checkpoints"
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 2))
    ampkit.Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=torch.nn.functional.mse_loss,
        max_steps=4,
        precision="fp32",
        device="cpu",
        batch_size=4,
        checkpoint=ampkit.CheckpointConfig(root, every=2),
        logging=ampkit.LoggingConfig(progress_bar=False),
    ).fit(data)
    newest = root / "step-00000004"
    state = newest / "state.pt"
    state.write_bytes(pickle.dumps(_RunsCode(tmp_path / "ran")))
    manifest = json.loads((newest / "manifest.json").read_text())
    manifest["files"]["state.pt"] = {
        "sha256": hashlib.sha256(state.read_bytes()).hexdigest(),
        "bytes": state.stat().st_size,
    }
    reseal(newest, manifest)
    path, notes = find_resume_checkpoint(root, "auto")
    assert path is not None and path.name == "step-00000002"
    assert len(notes) == 1 and "could not be loaded safely" in notes[0], notes
    assert not (tmp_path / "ran").exists()


def reseal(path, manifest) -> None:
    """Write ``manifest`` and seal it in ``COMPLETE`` as a writer would (an attacker who
    recomputes every digest)."""
    text = json.dumps(manifest).encode()
    (path / "manifest.json").write_bytes(text)
    (path / "COMPLETE").write_bytes(seal(manifest["step"], text))

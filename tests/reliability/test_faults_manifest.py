"""Round 4 (issue 38), checkpoints: the manifest trusted too much, and files that hang or lie.

Items 1 (a run folder named with bytes that are not UTF-8), 2 (an edited manifest), 5 (a FIFO
or ``/dev/zero`` where a manifest or ``--config`` is read), 8 (pruning while files vanish, a
linked step folder), 10 (a manifest nested 100,000 deep) and 12 (verify and resume agree: the
world size's type, the state's step).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from faults import TINY, cli, error_line

import ampkit
from ampkit.checkpoint import folder
from ampkit.checkpoint.folder import (
    find_checkpoints,
    latest_valid_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    read_weights,
    verify_checkpoint,
    write_checkpoint,
)
from ampkit.checkpoint.manifest import seal
from ampkit.checkpoint.survey import survey_checkpoints
from ampkit.errors import CheckpointError


def _write(root: Path, step: int) -> Path:
    weights = {"w": torch.full((3, 4), float(step)), "b": torch.arange(4.0)}
    state = {"trainer": {"step": step}, "rng": [{}], "lr": 0.1}
    return write_checkpoint(root, step, weights, state, {"precision": "fp32", "world_size": 1})


def _edit(path: Path, change) -> None:
    """Change a manifest in place, as a person with an editor would (the seal left alone)."""
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _reseal(path: Path, manifest: dict) -> None:
    """Write ``manifest`` and seal it as the writer would."""
    text = json.dumps(manifest).encode()
    (path / "manifest.json").write_bytes(text)
    (path / "COMPLETE").write_bytes(seal(manifest["step"], text))


# -- item 1: paths of any bytes ------------------------------------------------------------------


def test_a_run_folder_named_with_non_utf8_bytes_verifies_and_loads(tmp_path):
    root = Path(os.fsdecode(os.fsencode(tmp_path) + b"/r\xff"))
    path = _write(root, 3)
    assert verify_checkpoint(path)["step"] == 3
    weights, state, _ = load_checkpoint(path)
    assert weights is not None and torch.equal(weights["w"], torch.full((3, 4), 3.0))
    assert state["trainer"] == {"step": 3}
    assert torch.equal(read_weights(path).tensors["w"], torch.full((3, 4), 3.0))
    survey = survey_checkpoints(root)
    assert [check.ok for check in survey.checks] == [True], survey.checks[0].problem


# -- item 2: the manifest sealed by COMPLETE -----------------------------------------------------


def test_an_alias_added_to_the_newest_manifest_is_refused_and_resume_falls_back(tmp_path):
    _write(tmp_path, 1)
    newest = _write(tmp_path, 2)
    _edit(newest, lambda m: m.update(aliases={"w": "b"}))
    with pytest.raises(CheckpointError, match=r"manifest\.json is damaged: its BLAKE3 differs"):
        verify_checkpoint(newest)
    info, problems = latest_valid_checkpoint(tmp_path)
    assert info is not None and info.step == 1 and len(problems) == 1


def test_an_edited_keep_last_deletes_no_checkpoint(tmp_path):
    out = tmp_path / "run"
    args = [*TINY, "--out", str(out), "--checkpoint-every", "1", "--keep-last", "3"]
    assert cli("train", *args).code == 0
    assert [c.step for c in find_checkpoints(out / "checkpoints")] == [2, 3, 4]
    _edit(out / "checkpoints/step-00000004", lambda m: m["config"].update(keep_last=1))
    resumed = cli("train", *[a for a in args if a not in ("--keep-last", "3")], "--steps", "6",
                  "--resume", "auto")  # fmt: skip
    assert resumed.code == 0, resumed.stderr
    # step 4's edited manifest is refused: resumed from step 3, still keeping 3
    assert [c.step for c in find_checkpoints(out / "checkpoints")] == [4, 5, 6]


def test_an_older_unsealed_manifest_still_verifies_but_a_format_4_one_must_be_sealed(tmp_path):
    path = _write(tmp_path, 5)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "COMPLETE").write_text("5\n")  # the marker as format 3 wrote it
    with pytest.raises(CheckpointError, match="COMPLETE records none"):
        verify_checkpoint(path)
    manifest["format"] = 3
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert verify_checkpoint(path)["format"] == 3


# -- items 5 and 10: only regular files, bounded size and depth ----------------------------------


@pytest.mark.timeout(60)
def test_a_manifest_that_is_a_fifo_is_refused_at_once(tmp_path):
    _write(tmp_path, 1)
    newest = _write(tmp_path, 2)
    (newest / "manifest.json").unlink()
    os.mkfifo(newest / "manifest.json")
    with pytest.raises(CheckpointError, match=r"could not be read \(it is a FIFO"):
        verify_checkpoint(newest)
    info, _ = latest_valid_checkpoint(tmp_path)
    assert info is not None and info.step == 1


@pytest.mark.timeout(60)
def test_a_manifest_linked_to_dev_zero_is_refused_without_reading_it(tmp_path):
    path = _write(tmp_path, 1)
    (path / "manifest.json").unlink()
    (path / "manifest.json").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="it is a character device, not a regular file"):
        verify_checkpoint(path)


@pytest.mark.timeout(60)
def test_config_dev_zero_is_one_line_exit_2(tmp_path):
    result = cli("train", "--config", "/dev/zero", "--out", str(tmp_path / "run"))
    assert result.code == 2
    assert "character device, not a regular file" in error_line(result)


def test_a_manifest_nested_100k_deep_is_damaged_and_resume_falls_back(tmp_path):
    _write(tmp_path, 1)
    newest = _write(tmp_path, 2)
    text = b"[" * 100_000
    (newest / "manifest.json").write_bytes(text)
    (newest / "COMPLETE").write_bytes(seal(2, text))  # the seal matches: only the depth is wrong
    with pytest.raises(CheckpointError, match="nest more than 64 deep"):
        verify_checkpoint(newest)
    info, problems = latest_valid_checkpoint(tmp_path)
    assert info is not None and info.step == 1 and len(problems) == 1


# -- item 8: pruning while another process deletes, and links -------------------------------------


def test_pruning_tolerates_a_checkpoint_another_process_deleted(tmp_path, monkeypatch):
    for step in (1, 2, 3):
        _write(tmp_path, step)
    listed = find_checkpoints(tmp_path)
    shutil.rmtree(listed[0].path)  # the other process was first
    monkeypatch.setattr(folder, "find_checkpoints", lambda root: listed)  # listed before that
    removed = prune_checkpoints(tmp_path, 1)
    assert [p.name for p in removed] == ["step-00000001", "step-00000002"]
    assert [c.step for c in find_checkpoints(tmp_path)] == [3]


def test_pruning_a_linked_step_folder_removes_the_link_not_its_target(tmp_path):
    elsewhere = _write(tmp_path / "elsewhere", 1)
    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / "step-00000001").symlink_to(elsewhere, target_is_directory=True)
    _write(root, 2)
    prune_checkpoints(root, 1)
    assert not (root / "step-00000001").exists()
    assert verify_checkpoint(elsewhere)["step"] == 1


# -- item 12: verify and resume read the same facts ----------------------------------------------


def test_a_string_world_size_fails_verify_as_it_fails_resume(tmp_path):
    path = _write(tmp_path, 1)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["world_size"] = "1"
    _reseal(path, manifest)
    with pytest.raises(CheckpointError, match=r"world_size='1'; it must be an integer"):
        verify_checkpoint(path)


def _trainer_run(root: Path) -> None:
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


def test_a_state_of_another_step_is_refused_by_verify_and_resume(tmp_path):
    from ampkit.checkpoint._digest import FileDigest, file_digest

    root = tmp_path / "checkpoints"
    _trainer_run(root)
    newest = root / "step-00000004"
    shutil.copyfile(root / "step-00000002/state.pt", newest / "state.pt")
    manifest = json.loads((newest / "manifest.json").read_text())
    state = newest / "state.pt"
    manifest["files"]["state.pt"] = FileDigest(file_digest(state), state.stat().st_size).entry()
    _reseal(newest, manifest)
    with pytest.raises(CheckpointError, match="records step 2 but its manifest step 4"):
        verify_checkpoint(newest)
    info, _ = latest_valid_checkpoint(root)
    assert info is not None and info.step == 2

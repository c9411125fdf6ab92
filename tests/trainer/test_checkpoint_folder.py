"""Atomic checkpoint files: layout, verification, corruption, retention."""

from __future__ import annotations

import json

import pytest
import torch

from ampkit import CheckpointError
from ampkit.trainer.checkpoint_folder import (
    find_checkpoints,
    latest_valid_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    verify_checkpoint,
)


def write(folder, step: int):
    weights = {"w": torch.full((3, 4), float(step)), "b": torch.arange(4, dtype=torch.bfloat16)}
    state = {"step": step, "opt": {"m": torch.ones(2)}, "names": ["a", "b"], "lr": 0.1}
    return save_checkpoint(folder, step, weights, state, {"precision": "fp32"})


def test_round_trip_stores_fp32_weights_and_state(tmp_path):
    path = write(tmp_path, 7)
    assert path.name == "step-00000007"
    assert sorted(p.name for p in path.iterdir()) == [
        "COMPLETE",
        "manifest.json",
        "model.safetensors",
        "state.pt",
    ]
    weights, state, manifest = load_checkpoint(path)
    assert weights["b"].dtype == torch.float32 and torch.equal(
        weights["w"], torch.full((3, 4), 7.0)
    )
    assert state["step"] == 7 and torch.equal(state["opt"]["m"], torch.ones(2))
    assert manifest["step"] == 7 and manifest["precision"] == "fp32"
    assert set(manifest["files"]) == {"model.safetensors", "state.pt"}


def test_never_overwrites_a_complete_checkpoint(tmp_path):
    write(tmp_path, 3)
    with pytest.raises(CheckpointError, match="never overwrites"):
        write(tmp_path, 3)


@pytest.mark.parametrize(
    "damage",
    ["truncate", "append", "flip"],
)
@pytest.mark.parametrize("name", ["model.safetensors", "state.pt"])
def test_damaged_file_is_refused_by_name(tmp_path, damage, name):
    path = write(tmp_path, 1)
    file = path / name
    data = bytearray(file.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "append":
        data += b"\0"
    else:
        data[len(data) // 2] ^= 0x01
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=name):
        load_checkpoint(path)


def test_folder_without_marker_is_ignored_and_refused(tmp_path):
    path = write(tmp_path, 2)
    (path / "COMPLETE").unlink()
    assert find_checkpoints(tmp_path) == []
    with pytest.raises(CheckpointError, match="COMPLETE"):
        verify_checkpoint(path)


def test_temporary_folders_are_not_checkpoints(tmp_path):
    write(tmp_path, 1)
    (tmp_path / "step-00000002.tmp-12345").mkdir()
    assert [c.step for c in find_checkpoints(tmp_path)] == [1]


def test_latest_valid_falls_back_past_a_corrupt_newest(tmp_path):
    for step in (1, 2, 3):
        write(tmp_path, step)
    (tmp_path / "step-00000003" / "state.pt").write_bytes(b"garbage")
    info, problems = latest_valid_checkpoint(tmp_path)
    assert info.step == 2
    assert len(problems) == 1 and "step-00000003" in str(problems[0])


def test_missing_folder_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "step-00000001")


def test_state_with_code_is_refused_on_load(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("executed!",))

    path = save_checkpoint(tmp_path, 1, {"w": torch.ones(1)}, {"x": Evil()})
    with pytest.raises(CheckpointError, match="could not be loaded safely"):
        load_checkpoint(path)


def test_prune_keeps_newest_and_removes_stale_temporaries(tmp_path):
    for step in (1, 2, 3, 4):
        write(tmp_path, step)
    (tmp_path / "step-00000005.tmp-999").mkdir()
    prune_checkpoints(tmp_path, keep_last=2)
    assert [c.step for c in find_checkpoints(tmp_path)] == [3, 4]
    assert not (tmp_path / "step-00000005.tmp-999").exists()


def test_manifest_is_json_with_sizes(tmp_path):
    path = write(tmp_path, 9)
    manifest = json.loads((path / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert (path / name).stat().st_size == entry["bytes"]
        assert len(entry["sha256"]) == 64


def test_damaged_checkpoint_of_same_step_is_kept_aside_not_overwritten(tmp_path):
    path = write(tmp_path, 5)
    (path / "state.pt").write_bytes(b"damaged")
    write(tmp_path, 5)
    kept = [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(kept) == 1 and (tmp_path / kept[0] / "state.pt").read_bytes() == b"damaged"
    load_checkpoint(tmp_path / "step-00000005")

"""Atomic checkpoint files: layout, verification, corruption, retention."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import subprocess

import pytest
import torch

from ampkit import CheckpointError
from ampkit.checkpoint.folder import (
    checkpoint_step,
    find_checkpoints,
    latest_valid_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    verify_checkpoint,
    write_checkpoint,
)
from ampkit.checkpoint.manifest import seal
from ampkit.checkpoint.weights import write_weights
from ampkit.errors import NonFiniteWeightsError, StorageError


def write(folder, step: int):
    weights = {"w": torch.full((3, 4), float(step)), "b": torch.arange(4, dtype=torch.bfloat16)}
    state = {"step": step, "opt": {"m": torch.ones(2)}, "names": ["a", "b"], "lr": 0.1}
    return write_checkpoint(folder, step, weights, state, {"precision": "fp32"})


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

    path = write_checkpoint(tmp_path, 1, {"w": torch.ones(1)}, {"x": Evil()})
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
        assert len(entry["blake3"]) == 64


def _as_format_2(path) -> None:
    """Rewrite a checkpoint's manifest as ampkit wrote it before BLAKE3: format 2, SHA-256."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format"] = 2
    manifest["files"] = {
        name: {
            "sha256": hashlib.sha256((path / name).read_bytes()).hexdigest(),
            "bytes": e["bytes"],
        }
        for name, e in manifest["files"].items()
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "COMPLETE").write_text(f"{manifest['step']}\n")  # the marker held the step alone


def test_a_checkpoint_hashed_with_sha256_by_an_older_ampkit_still_verifies(tmp_path):
    path = write(tmp_path, 4)
    _as_format_2(path)
    assert verify_checkpoint(path)["format"] == 2
    weights, state, _ = load_checkpoint(path)
    assert weights is not None and torch.equal(weights["w"], torch.full((3, 4), 4.0))
    assert state["step"] == 4
    data = bytearray((path / "state.pt").read_bytes())
    data[len(data) // 2] ^= 1  # one bit flipped, the size unchanged
    (path / "state.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="state.pt is corrupt .*SHA-256 differs"):
        verify_checkpoint(path)


def test_every_digest_an_entry_lists_is_checked(tmp_path):
    path = write(tmp_path, 4)

    def add_wrong_sha256(m):
        m["files"]["model.safetensors"]["sha256"] = "0" * 64  # beside the right BLAKE3
        return m

    rewrite_manifest(path, add_wrong_sha256)
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt .*SHA-256 differs"):
        verify_checkpoint(path)


def test_damaged_checkpoint_of_same_step_is_kept_aside_not_overwritten(tmp_path):
    path = write(tmp_path, 5)
    (path / "state.pt").write_bytes(b"damaged")
    write(tmp_path, 5)
    kept = [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(kept) == 1 and (tmp_path / kept[0] / "state.pt").read_bytes() == b"damaged"
    load_checkpoint(tmp_path / "step-00000005")


# -- manifest robustness -------------------------------------------------------------------------


def rewrite_manifest(path, change) -> None:
    """Change a manifest and seal it again, as a writer would have: what is then refused is
    the change itself, not the broken seal."""
    manifest = json.loads((path / "manifest.json").read_text())
    text = json.dumps(change(manifest)).encode()
    (path / "manifest.json").write_bytes(text)
    (path / "COMPLETE").write_bytes(seal(checkpoint_step(path), text))


def _drop_bytes(m):
    del m["files"]["state.pt"]["bytes"]
    return m


def _bytes_as_text(m):
    m["files"]["state.pt"]["bytes"] = str(m["files"]["state.pt"]["bytes"])
    return m


def _files_as_list(m):
    m["files"] = list(m["files"])
    return m


def _entry_as_list(m):
    m["files"]["model.safetensors"] = ["blake3", 1]
    return m


def _digest_as_number(m):
    m["files"]["model.safetensors"]["blake3"] = 12345
    return m


def _no_digest(m):
    del m["files"]["model.safetensors"]["blake3"]
    return m


def _other_step(m):
    m["step"] = 7
    return m


@pytest.mark.parametrize(
    "change",
    [
        lambda m: [m],
        lambda m: "manifest",
        _files_as_list,
        _entry_as_list,
        _drop_bytes,
        _bytes_as_text,
        _digest_as_number,
        _no_digest,
        _other_step,
        lambda m: {**m, "format": 99},
        lambda m: {**m, "layout": "zip"},
        lambda m: {**m, "aliases": ["lm_head.weight"]},
    ],
    ids=[
        "list",
        "string",
        "files-list",
        "entry-list",
        "no-bytes",
        "bytes-text",
        "digest-number",
        "no-digest",
        "other-step",
        "format",
        "layout",
        "aliases",
    ],
)
def test_malformed_manifest_is_damaged_and_auto_falls_back(tmp_path, change):
    write(tmp_path, 1)
    newest = write(tmp_path, 2)
    rewrite_manifest(newest, change)
    with pytest.raises(CheckpointError, match=r"manifest\.json is damaged"):
        verify_checkpoint(newest)
    info, problems = latest_valid_checkpoint(tmp_path)
    assert info.step == 1 and "step-00000002" in str(problems[0])


@pytest.mark.parametrize("files", [{}, {"state.pt": None}], ids=["no-files", "only-state"])
def test_manifest_without_the_weights_file_is_refused(tmp_path, files):
    older = write(tmp_path, 1)
    newest = write(tmp_path, 2)
    (newest / "model.safetensors").write_bytes((older / "model.safetensors").read_bytes())

    def shrink(m):
        m["files"] = {k: m["files"][k] for k in files}
        return m

    rewrite_manifest(newest, shrink)
    with pytest.raises(CheckpointError, match="full checkpoint holds exactly"):
        load_checkpoint(newest)
    assert latest_valid_checkpoint(tmp_path)[0].step == 1


def test_unsafe_state_error_never_suggests_weights_only_false(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("executed!",))

    path = write_checkpoint(tmp_path, 1, {"w": torch.ones(1)}, {"x": Evil()})
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert "refers to print" in message and "never runs code" in message
    assert "weights_only" not in message and "likely succeed" not in message


def test_a_file_is_not_called_missing(tmp_path):
    file = tmp_path / "model.pt"
    file.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint folder"):
        verify_checkpoint(file)


# -- tied weights, non-finite weights, failed writes ----------------------------------------------


def test_tied_weights_are_stored_once_and_tied_again_on_load(tmp_path):
    shared = torch.randn(5, 3)
    path = write_checkpoint(tmp_path, 1, {"wte": shared, "lm_head": shared, "b": torch.ones(3)}, {})
    weights, _, manifest = load_checkpoint(path)
    assert manifest["aliases"] == {"lm_head": "wte"}
    assert weights["lm_head"] is weights["wte"] and torch.equal(weights["wte"], shared)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_nonfinite_weights_are_refused_and_nothing_is_written(tmp_path, bad):
    weights = {"w": torch.ones(4), "v": torch.tensor([1.0, bad])}
    with pytest.raises(NonFiniteWeightsError, match=r"\(v\)"):
        write_checkpoint(tmp_path, 1, weights, {})
    with pytest.raises(NonFiniteWeightsError):
        write_weights(tmp_path / "final.safetensors", weights)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_temporary_folder(tmp_path, monkeypatch):
    import ampkit.checkpoint.folder as folder

    def failing(path, state):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(folder, "_write_state", failing)
    with pytest.raises(OSError):
        write(tmp_path, 1)
    assert list(tmp_path.iterdir()) == []


def test_a_state_that_fails_half_way_through_torch_save_leaves_nothing(tmp_path):
    # torch.save streams into the folder; the weights are already written when it fails
    state = {"optimizer": {"ok": torch.ones(3)}, "bad": lambda: None}
    with pytest.raises(Exception, match="pickle|lambda"):
        write_checkpoint(tmp_path, 1, {"w": torch.ones(4)}, state)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def tiny_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_disk_full_is_one_clear_error_and_removes_the_temporary_folder(tiny_disk):
    weights = {"w": torch.zeros(128 * 1024)}  # 512 KiB on a 256 KiB disk
    with pytest.raises(StorageError, match="the disk is full") as caught:
        write_checkpoint(tiny_disk / "ckpt", 1, weights, {})
    assert "\n" not in str(caught.value)
    assert list((tiny_disk / "ckpt").iterdir()) == []
    with pytest.raises(StorageError, match="the disk is full"):
        write_weights(tiny_disk / "final.safetensors", weights)
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["ckpt"]

"""Checkpoint files are streamed and hashed as written: same bytes, same hashes, same refusals."""

from __future__ import annotations

import hashlib
import json

import blake3
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

from ampkit.checkpoint._digest import (
    READ_BLOCK,
    FileDigest,
    HashingWriter,
    file_digest,
    write_hashed,
)
from ampkit.checkpoint.folder import load_checkpoint, verify_checkpoint, write_checkpoint
from ampkit.checkpoint.manifest import seal
from ampkit.checkpoint.weights import (
    ALIASES_KEY,
    nonfinite_names,
    write_weights,
    write_weights_hashed,
)
from ampkit.errors import NonFiniteWeightsError


def _weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    emb = torch.randn(700, 512)  # 1.4 MB: hashed on the helper thread
    return {
        "wte": emb,
        "head": emb,  # tied: stored once
        "block.w": torch.randn(33, 7, dtype=torch.bfloat16),
        "block.b": torch.randn(7, dtype=torch.float16),
        "empty": torch.empty(0, 3),
        "count": torch.tensor(5),
        'ünï "quoted"\n': torch.ones(2),
    }


def _b3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def test_the_streamed_file_is_byte_identical_to_safetensors_save(tmp_path):
    weights = _weights()
    found, digest = write_weights_hashed(tmp_path / "w.safetensors", weights)
    data = (tmp_path / "w.safetensors").read_bytes()
    stored = {k: v.float().contiguous() for k, v in weights.items() if k != "head"}
    assert found == {"head": "wte"}
    assert data == save(stored, metadata={ALIASES_KEY: json.dumps({"head": "wte"})})
    assert (digest.algorithm, digest.hexdigest, digest.bytes) == ("blake3", _b3(data), len(data))
    loaded = load_file(tmp_path / "w.safetensors")
    assert sorted(loaded) == sorted(stored)
    for name, tensor in stored.items():
        assert torch.equal(loaded[name], tensor), name


def test_several_metadata_entries_read_back_as_given(tmp_path):
    # safetensors orders metadata keys as its hash map does; ampkit writes them sorted
    write_weights(tmp_path / "w.safetensors", {"w": torch.ones(3)}, metadata={"z": "1", "a": "2"})
    with safe_open(tmp_path / "w.safetensors", framework="pt") as f:
        assert f.metadata() == {"z": "1", "a": "2"}
        assert torch.equal(f.get_tensor("w"), torch.ones(3))


def test_a_non_contiguous_view_is_written_as_its_values(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)
    write_weights(tmp_path / "w.safetensors", {"t": base.t(), "row": base[1]})
    loaded = load_file(tmp_path / "w.safetensors")
    assert torch.equal(loaded["t"], base.t()) and torch.equal(loaded["row"], base[1])


def test_the_manifest_hashes_are_those_of_the_files_on_disk(tmp_path):
    weights = {"w": torch.randn(600, 600)}
    state = {"optimizer": {"m": torch.randn(800, 700), "v": torch.randn(5)}, "step": 3}
    path = write_checkpoint(tmp_path, 3, weights, state)
    manifest = verify_checkpoint(path)
    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        assert entry == {"blake3": _b3(data), "bytes": len(data)}, name
    loaded, loaded_state, _ = load_checkpoint(path)
    assert loaded is not None and torch.equal(loaded["w"], weights["w"])
    assert torch.equal(loaded_state["optimizer"]["m"], state["optimizer"]["m"])


def test_complete_seals_the_manifest_with_the_digest_its_write_computed(tmp_path):
    # the commit hashes the manifest once, as it writes it: COMPLETE records that BLAKE3
    path = write_checkpoint(tmp_path, 3, {"w": torch.ones(4)}, {"step": 3})
    manifest = (path / "manifest.json").read_bytes()
    marker = (path / "COMPLETE").read_bytes()
    assert marker == f"3\nmanifest blake3 {_b3(manifest)}\n".encode()
    written = write_hashed(tmp_path / "m.json", manifest)
    assert seal(3, written) == seal(3, manifest) == marker
    with pytest.raises(ValueError, match="sha256"):
        seal(3, FileDigest("0" * 64, len(manifest), "sha256"))


def test_writes_hashed_in_the_background_or_inline_hash_the_same(tmp_path):
    chunks = [bytes(range(256)) * 5000, b"small", bytearray(3 << 20)]

    def body(writer: HashingWriter) -> None:
        writer.write(chunks[0], stable=True)
        writer.write(chunks[1])
        writer.write(memoryview(chunks[2]))

    for atomic in (True, False):
        digest = write_hashed(tmp_path / f"f{atomic}", body, atomic=atomic)
        data = (tmp_path / f"f{atomic}").read_bytes()
        assert data == b"".join(chunks)
        assert (digest.algorithm, digest.hexdigest, digest.bytes) == (
            "blake3",
            _b3(data),
            len(data),
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fFalse", "fTrue"]


def test_a_failing_in_place_write_leaves_no_file(tmp_path):
    def body(writer: HashingWriter) -> None:
        writer.write(bytes(2 << 20))
        raise RuntimeError("stopped half-way")

    with pytest.raises(RuntimeError, match="half-way"):
        write_hashed(tmp_path / "f", body, atomic=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_the_fused_finite_check_finds_every_kind_of_nonfinite(dtype, bad):
    tensors = {
        "ok": torch.ones(5, dtype=dtype),
        "bad": torch.tensor([1.0, bad, 2.0], dtype=dtype),
        "ints": torch.tensor([1, 2]),
        "empty": torch.empty(0, dtype=dtype),
        "ok2": torch.full((3,), -1e4, dtype=dtype),
    }
    assert nonfinite_names(tensors) == ["bad"]


def test_nonfinite_weights_in_a_large_tensor_are_refused(tmp_path):
    weights = {"w": torch.randn(1000, 1000)}
    weights["w"][999, 999] = float("nan")
    with pytest.raises(NonFiniteWeightsError, match=r"\(w\)"):
        write_checkpoint(tmp_path, 1, weights, {})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("size", [0, 1, READ_BLOCK - 1, READ_BLOCK, 2 * READ_BLOCK + 3])
def test_a_file_on_disk_is_hashed_whole_with_either_algorithm(tmp_path, size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    (tmp_path / "f").write_bytes(data)
    assert file_digest(tmp_path / "f") == _b3(data)
    assert file_digest(tmp_path / "f", "sha256") == hashlib.sha256(data).hexdigest()

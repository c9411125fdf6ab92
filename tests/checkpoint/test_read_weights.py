"""The one weights reader: a safetensors file, a checkpoint folder or a run folder."""

from __future__ import annotations

import pytest
import torch

from ampkit import CheckpointError, ConfigurationError, DataError
from ampkit.checkpoint.folder import read_weights, write_checkpoint
from ampkit.checkpoint.weights import write_weights


def _weights() -> dict[str, torch.Tensor]:
    shared = torch.arange(6, dtype=torch.float32).view(2, 3)
    return {"wte": shared, "head": shared, "b": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)}


def test_a_safetensors_file_is_read_in_fp32_with_ties_and_metadata(tmp_path):
    file = tmp_path / "final.safetensors"
    write_weights(file, _weights(), metadata={"precision": "bf16"})
    read = read_weights(file)
    assert read.source == file and read.manifest is None
    assert read.metadata == {"precision": "bf16"}
    assert read.aliases == {"head": "wte"}
    assert read.tensors["head"] is read.tensors["wte"]
    assert read.tensors["b"].dtype == torch.float32
    assert torch.equal(read.tensors["b"], torch.tensor([1.5, -2.0]))


def test_a_checkpoint_folder_is_verified_and_read(tmp_path):
    path = write_checkpoint(tmp_path / "ckpt", 3, _weights(), {"x": 1})
    read = read_weights(path)
    assert read.source == path and read.manifest is not None and read.manifest["step"] == 3
    assert read.tensors["head"] is read.tensors["wte"]


def test_a_run_folder_gives_its_final_weights(tmp_path):
    write_weights(tmp_path / "model.safetensors", {"w": torch.ones(2)})
    read = read_weights(tmp_path)
    assert read.source == tmp_path / "model.safetensors"
    assert torch.equal(read.tensors["w"], torch.ones(2))


def test_a_damaged_checkpoint_is_refused_by_name(tmp_path):
    path = write_checkpoint(tmp_path, 1, {"w": torch.ones(8)}, {})
    data = bytearray((path / "model.safetensors").read_bytes())
    data[-1] ^= 0x01
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt"):
        read_weights(path)


def test_an_incomplete_checkpoint_is_refused(tmp_path):
    path = write_checkpoint(tmp_path, 1, {"w": torch.ones(2)}, {})
    (path / "COMPLETE").unlink()
    with pytest.raises(CheckpointError, match="COMPLETE"):
        read_weights(path)


@pytest.mark.parametrize("what", ["missing", "empty folder", "not safetensors"])
def test_nothing_readable_is_refused(tmp_path, what):
    """Nothing usable at the path is the caller's input (exit 2), not a damaged checkpoint."""
    target = tmp_path / "x"
    if what == "empty folder":
        target.mkdir()
    elif what == "not safetensors":
        target.write_bytes(b"not a weights file")
    with pytest.raises((ConfigurationError, DataError), match=str(target)) as raised:
        read_weights(target)
    assert raised.value.exit_code == 2

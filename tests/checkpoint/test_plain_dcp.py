"""DCP checkpoints that ampkit did not write (``dcp.save`` of ``{"model": sd, "optim": osd}``
as torch's tutorials do, torchtitan's ``"optimizer"`` key, a model-only one with the model's
state at the top): the Trainer resumes the weights (and optimizer state) from them, ``ampkit
checkpoint export`` exports their weights, each with a note on what was not in them; "not
completely written" stays for ampkit's own incomplete checkpoints."""

from __future__ import annotations

import copy
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from click.testing import CliRunner
from safetensors.torch import load_file
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

import ampkit
from ampkit import CheckpointError
from ampkit.checkpoint.folder import begin_checkpoint, is_plain_dcp, read_weights, verify_checkpoint
from ampkit.cli import main


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    return [
        (torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(3)
    ]


def adamw(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2)


def trained() -> tuple[nn.Module, torch.optim.Optimizer]:
    """A model and its AdamW after two steps (the state another tool would save)."""
    model = make_model()
    optimizer = adamw(model.parameters())
    for x, y in batches()[:2]:
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def control_step(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> nn.Module:
    """A copy of ``model`` after one more AdamW step on the Trainer's first batch, from the
    state of ``optimizer`` (None: a fresh AdamW): what a resumed Trainer's first step gives."""
    control = copy.deepcopy(model)
    control_optimizer = adamw(control.parameters())
    if optimizer is not None:
        control_optimizer.load_state_dict(optimizer.state_dict())
    x, y = batches()[0]
    nn.functional.cross_entropy(control(x), y).backward()
    control_optimizer.step()
    return control


def save_plain(folder: Path, state: dict) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP's note that no process group exists
        dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    return folder


@pytest.fixture
def plain(tmp_path) -> tuple[Path, nn.Module, torch.optim.Optimizer]:
    model, optimizer = trained()
    sd, osd = get_state_dict(model, optimizer)
    return save_plain(tmp_path / "step-100", {"model": sd, "optim": osd}), model, optimizer


def trainer(tmp_path: Path, resume: Path, max_steps: int = 1) -> ampkit.Trainer:
    return ampkit.Trainer(
        make_model(),
        adamw,
        max_steps=max_steps,
        loss_fn=nn.functional.cross_entropy,
        precision="fp32",
        device="cpu",
        checkpoint=ampkit.CheckpointConfig(tmp_path / "ckpt", resume=resume),
        logging=ampkit.LoggingConfig(progress_bar=False),
    )


def test_trainer_resumes_model_and_optimizer_then_steps_as_the_original_would(plain, tmp_path):
    folder, model, optimizer = plain
    assert is_plain_dcp(folder)
    # control: one more step of the original model and optimizer on the Trainer's first batch
    control = control_step(model, optimizer)

    t = trainer(tmp_path, folder)
    result = t.fit(batches())
    note = next(n for n in result.notes if "ampkit did not write" in n)
    assert "loaded the model weights and the optimizer state" in note
    assert "no trainer step, scheduler, loss-scaler, RNG or data position" in note
    for name, tensor in control.state_dict().items():
        assert torch.equal(t.raw_model.state_dict()[name], tensor), name
    # its own checkpoint is ampkit's, at step 1
    assert verify_checkpoint(tmp_path / "ckpt/step-00000001")["step"] == 1


def test_torchtitans_layout_flat_model_and_flattened_optimizer_resumes(tmp_path):
    # torchtitan: the model's state at the top level, the optimizer under "optimizer",
    # flattened (param groups per parameter)
    model, optimizer = trained()
    sd, osd = get_state_dict(
        model, optimizer, options=StateDictOptions(flatten_optimizer_state_dict=True)
    )
    folder = save_plain(tmp_path / "titan", {**sd, "optimizer": osd})
    control = control_step(model, optimizer)
    t = trainer(tmp_path, folder)
    notes = t.fit(batches()).notes
    assert any("loaded the model weights and the optimizer state" in n for n in notes), notes
    for name, tensor in control.state_dict().items():
        assert torch.equal(t.raw_model.state_dict()[name], tensor), name


def test_model_only_checkpoint_at_the_top_loads_weights_and_says_the_optimizer_is_fresh(tmp_path):
    model, _ = trained()
    folder = save_plain(tmp_path / "titan-last", dict(model.state_dict()))  # torchtitan's last step
    t = trainer(tmp_path, folder)
    result = t.fit(batches())
    note = next(n for n in result.notes if "ampkit did not write" in n)
    assert "loaded the model weights from it" in note
    assert "the optimizer starts fresh: it holds no optimizer state" in note
    # a fresh AdamW's first step from the loaded weights: the control
    control = control_step(model, None)
    for name, tensor in control.state_dict().items():
        assert torch.equal(t.raw_model.state_dict()[name], tensor), name


def test_optimizer_state_keyed_by_index_is_not_loaded_and_the_note_says_why(tmp_path):
    model, optimizer = trained()
    folder = save_plain(
        tmp_path / "by-index",
        {"model": dict(model.state_dict()), "optimizer": optimizer.state_dict()},
    )
    result = trainer(tmp_path, folder).fit(batches())
    note = next(n for n in result.notes if "ampkit did not write" in n)
    assert "optimizer state ('optimizer') has none for parameter 0.weight" in note


def test_a_model_of_another_shape_is_refused(tmp_path):
    folder = save_plain(tmp_path / "other", {"model": {"0.weight": torch.zeros(2, 2)}})
    with pytest.raises(CheckpointError, match="another shape"):
        trainer(tmp_path, folder).fit(batches())


def test_export_writes_the_weights_with_a_note(plain, tmp_path):
    folder, model, _ = plain
    out = tmp_path / "model.safetensors"
    result = CliRunner().invoke(main, ["checkpoint", "export", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "ampkit did not write" in result.stderr and "exported" in result.stdout
    written = load_file(out)
    assert written.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(written[name], tensor), name
    assert read_weights(folder).tensors.keys() == written.keys()


def test_not_completely_written_only_for_ampkits_own(tmp_path, plain):
    folder, _, _ = plain
    with pytest.raises(CheckpointError, match="ampkit did not write"):
        verify_checkpoint(folder)
    tmp = begin_checkpoint(tmp_path / "ckpt", 3)  # ampkit's, interrupted
    (tmp / "state.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="not completely written"):
        verify_checkpoint(tmp)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoint: neither ampkit's"):
        verify_checkpoint(empty)


class _RunsCode:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_a_plain_index_that_would_run_code_is_refused_unrun(tmp_path):
    folder = tmp_path / "evil"
    folder.mkdir()
    target = tmp_path / "ran"
    (folder / ".metadata").write_bytes(pickle.dumps(_RunsCode(target)))
    (folder / "__0_0.distcp").write_bytes(b"")
    assert is_plain_dcp(folder)
    with pytest.raises(CheckpointError, match="not a readable DCP index"):
        trainer(tmp_path, folder).fit(batches())
    result = CliRunner().invoke(
        main, ["checkpoint", "export", str(folder), "--out", str(tmp_path / "x.safetensors")]
    )
    assert result.exit_code != 0 and "not a readable DCP index" in result.output
    assert not target.exists() and not (tmp_path / "x.safetensors").exists()

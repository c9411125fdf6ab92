"""The Trainer's checkpoint errors: right about what the user passed, nothing left behind."""

from __future__ import annotations

import pytest
import torch

import ampkit
from ampkit import CheckpointError, ConfigurationError, NonFiniteWeightsError


class PoisonAt(ampkit.Callback):
    """Puts a NaN into the weights at one step, as a diverged run would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, result) -> None:
        if trainer.step == self.step:
            with torch.no_grad():
                next(trainer.raw_model.parameters())[0, 0] = float("nan")


def trainer(tmp_path, *, resume=None, metrics=True, checkpoints=True, **kwargs) -> ampkit.Trainer:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    options = dict(
        max_steps=4,
        loss_fn=torch.nn.functional.cross_entropy,
        precision="fp32",
        device="cpu",
        batch_size=4,
        checkpoint=(
            ampkit.CheckpointConfig(tmp_path / "ckpt", every=2, resume=resume)
            if checkpoints
            else None
        ),
        logging=ampkit.LoggingConfig(
            log_every=1, metrics_file=tmp_path / "metrics.jsonl" if metrics else None
        ),
    )
    options.update(kwargs)
    return ampkit.Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), **options)


def data() -> torch.utils.data.Dataset:
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(32, 4, generator=g), torch.zeros(32).long())


def test_resume_pointed_at_a_file_says_it_is_a_file(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"weights")
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint folder"):
        trainer(tmp_path, resume=file)


def test_failed_save_leaves_nothing_and_the_retry_message_is_right(tmp_path):
    with pytest.raises(NonFiniteWeightsError, match="inf/NaN"):
        trainer(tmp_path, callbacks=[PoisonAt(2)]).fit(data())
    assert list((tmp_path / "ckpt").glob("*")) == []  # no step-*.tmp-PID folder
    lost = (tmp_path / "metrics.jsonl").read_text()
    # nothing was committed, so resume="auto" is a fresh start that keeps the lost rows aside
    result = trainer(tmp_path, resume="auto").fit(data())
    kept = list(tmp_path.glob("metrics.lost-*.jsonl"))
    assert len(kept) == 1 and kept[0].read_text() == lost
    assert any("committed no checkpoint" in note for note in result.notes)
    assert result.resumed_from is None and result.steps == 4


def test_fresh_run_over_checkpoints_names_what_was_passed(tmp_path):
    trainer(tmp_path, metrics=False).fit(data())
    with pytest.raises(ConfigurationError, match=r"was not asked to resume \(resume=None\)"):
        trainer(tmp_path, metrics=False).fit(data())


def test_nonfinite_final_weights_are_refused(tmp_path):
    final = tmp_path / "model.safetensors"
    run = trainer(tmp_path, checkpoints=False, final_weights=final)
    run.callbacks.append(PoisonAt(4))
    with pytest.raises(NonFiniteWeightsError):
        run.fit(data())
    assert not final.exists()

"""Round 4 (issue 38) item 3: the Hugging Face and Lightning callbacks' counters and first-NaN
record across a resume. A real ``transformers.Trainer`` on a tiny GPT-2 built from a config
(random weights, no download) trains 4 steps with a NaN put into ``h.1.mlp`` after step 2 and
a checkpoint every 2 steps, then ``train(resume_from_checkpoint=True)`` continues to step 6:
the first NaN stays the one of step 3 in ``h.1.mlp``, not a new one blamed on another module."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch

transformers = pytest.importorskip("transformers")

from ampkit.integrations import NONFINITE_STEP, SKIPPED_STEPS  # noqa: E402
from ampkit.integrations.transformers import STATE_FILE, AmpkitCallback  # noqa: E402

BAD = "transformer.h.1.mlp.c_fc"


def _gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def _rows() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 64, (16,), generator=g) for _ in range(48)]
    return [{"input_ids": i, "labels": i} for i in ids]


class _NanAfterStep2(transformers.TrainerCallback):
    def __init__(self, model: torch.nn.Module) -> None:
        self.weight = model.transformer.h[1].mlp.c_fc.weight

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            with torch.no_grad():
                self.weight[0, 0] = math.nan


def _trainer(out, model, steps: int, *callbacks) -> transformers.Trainer:
    args = transformers.TrainingArguments(
        output_dir=str(out), use_cpu=True, bf16=True, max_steps=steps, logging_steps=1,
        report_to="none", save_strategy="steps", save_steps=2, per_device_train_batch_size=4,
        disable_tqdm=True, seed=0,
    )  # fmt: skip
    return transformers.Trainer(
        model=model, args=args, train_dataset=_rows(), callbacks=list(callbacks)
    )


@pytest.mark.slow
def test_hf_callback_state_survives_train_resume_from_checkpoint(tmp_path):
    out = tmp_path / "out"
    model = _gpt2()
    first = _trainer(out, model, 4, _NanAfterStep2(model))
    cb = AmpkitCallback.attach(first)
    first.train()
    assert cb.nonfinite_step == 3 and cb.first.module == BAD
    saved = (out / "checkpoint-4" / STATE_FILE).read_text()
    assert '"nonfinite_step": 3' in saved

    again = _trainer(out, _gpt2(), 6)
    resumed = AmpkitCallback.attach(again)
    again.train(resume_from_checkpoint=True)
    assert resumed.nonfinite_step == 3 and resumed.first is not None
    assert resumed.first.module == BAD and resumed.first.step == cb.first.step
    lines = [row for row in again.state.log_history if "loss" in row and row["step"] > 4]
    assert [row[NONFINITE_STEP] for row in lines] == [3, 3]
    assert [row[SKIPPED_STEPS] for row in lines] == [cb.skipped_steps] * 2


def test_hf_callback_state_dict_round_trip_and_refusal():
    cb = AmpkitCallback()
    cb.load_state_dict({"skipped_steps": 2, "nonfinite_step": None, "first": None})
    assert cb.state_dict() == {"skipped_steps": 2, "nonfinite_step": None, "first": None}
    with pytest.raises(ValueError, match="skipped_steps='2' is invalid"):
        cb.load_state_dict({"skipped_steps": "2", "nonfinite_step": None, "first": None})


# -- Lightning ------------------------------------------------------------------------------------


def _lightning_module(pl, overflow: set[int]):
    class Regression(pl.LightningModule):
        """A regression whose loss is multiplied by 1e30 at the ``overflow`` batch indices
        (its fp16 gradients overflow: the GradScaler skips those steps)."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x).float(), y)
            return loss * 1e30 if batch_idx in overflow else loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(24, 8, generator=g)
            data = torch.utils.data.TensorDataset(x, x @ torch.randn(8, 1, generator=g))
            return torch.utils.data.DataLoader(data, batch_size=4)

    return Regression()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")
def test_lightning_callback_counts_carry_over_a_resume(tmp_path):
    """Lightning's own fp16 GradScaler (on the CPU): 2 steps skipped before the checkpoint,
    none after; the resumed count stays 2 (it restarted at 0 and took the restored, lower
    scale for one more skip)."""
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.plugins.precision import MixedPrecision

    from ampkit.integrations.lightning import AmpkitCallback as LightningCallback

    def fit(overflow, steps, ckpt=None):
        cb = LightningCallback()
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        trainer = pl.Trainer(
            accelerator="cpu", max_steps=steps, log_every_n_steps=1, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)], callbacks=[cb],
        )  # fmt: skip
        trainer.fit(_lightning_module(pl, overflow), ckpt_path=ckpt)
        return trainer, cb

    trainer, cb = fit({0, 1}, 3)
    assert cb.skipped_steps == 2
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    _, resumed = fit(set(), 5, ckpt=str(tmp_path / "last.ckpt"))
    assert resumed.skipped_steps == 2

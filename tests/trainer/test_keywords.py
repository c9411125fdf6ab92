"""Keyword mistakes in the Python API: one typed line each (issue 32: old Trainer keywords
name their new form; issue 33: the nearest valid name, and fit without loss_fn)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ampkit
from ampkit import (
    CheckpointConfig,
    CompileConfig,
    DistributedConfig,
    EvalConfig,
    KeywordError,
    LoggingConfig,
    LossScaler,
    MixedPrecision,
    Trainer,
)

#: Every keyword an earlier Trainer signature had and the current one lacks (read from
#: ``git log -p -- src/ampkit/trainer/trainer.py``), with the new form its error must name.
OLD_KEYWORDS = {
    "checkpoint_dir": "checkpoint=CheckpointConfig(dir=..., every=...)",
    "checkpoint_every": "checkpoint=CheckpointConfig(dir, every=...)",
    "keep_last": "checkpoint=CheckpointConfig(dir, keep_last=...)",
    "resume": "checkpoint=CheckpointConfig(dir, resume=...)",
    "checkpoint_layout": "checkpoint=CheckpointConfig(dir, layout=...)",
    "async_checkpoint": "checkpoint=CheckpointConfig(dir, async_save=...)",
    "resume_precision_change": "checkpoint=CheckpointConfig(dir, allow_precision_change=...)",
    "run_config": "checkpoint=CheckpointConfig(dir, run_config=...)",
    "log_every": "logging=LoggingConfig(log_every=...)",
    "metrics_file": "logging=LoggingConfig(metrics_file=...)",
    "progress_bar": "logging=LoggingConfig(progress_bar=...)",
    "tokens_per_sample": "logging=LoggingConfig(tokens_per_sample=...)",
    "eval_every": "eval=EvalConfig(every=..., data=...)",
    "eval_data": "eval=EvalConfig(every=..., data=...)",
    "strategy": "distributed=DistributedConfig(strategy=...)",
    "compile_mode": "compile=CompileConfig(mode=...)",
    "fp8_plan": "precision=ampkit.Fp8(plan=...)",
    "update_compensation": "precision=ampkit.Bf16True(update_compensation=...)",
    "bf16_true_keep_fp32": "precision=ampkit.Bf16True(keep_fp32=...)",
    "scaler_options": "scaler=ampkit.LossScaler(...)",
}


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("keyword", sorted(OLD_KEYWORDS))
def test_an_old_trainer_keyword_fails_in_one_line_naming_its_new_form(keyword):
    model, optimizer = model_and_optimizer()
    with pytest.raises(TypeError) as info:  # still what `except TypeError` catches
        Trainer(model, optimizer, max_steps=1, **{keyword: 1})
    error = info.value
    assert isinstance(error, KeywordError) and error.keyword == keyword
    assert str(error) == f"Trainer({keyword}=...) moved: use {OLD_KEYWORDS[keyword]}."
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    ("make", "wrong", "meant"),
    [
        (lambda **kw: Trainer(*model_and_optimizer(), **kw), "steps", "max_steps"),
        (
            lambda **kw: Trainer(*model_and_optimizer(), max_steps=1, **kw),
            "mixed_precision",
            "precision",
        ),
        (
            lambda **kw: Trainer(*model_and_optimizer(), max_steps=1, **kw),
            "grad_accumulation_steps",
            "grad_accum_steps",
        ),
        (lambda **kw: CheckpointConfig("ckpt", **kw), "keep", "keep_last"),
        (lambda **kw: EvalConfig(every=1, data=[], **kw), "metric", "metrics"),
        (lambda **kw: LoggingConfig(**kw), "log_evry", "log_every"),
        (lambda **kw: DistributedConfig(**kw), "timeout", "timeout_s"),
        (lambda **kw: CompileConfig(**kw), "enable", "enabled"),
        (lambda **kw: MixedPrecision("fp32", "cpu", **kw), "grad_norm", "max_grad_norm"),
        (lambda **kw: LossScaler(**kw), "init_scaling", "init_scale"),
    ],
)
def test_an_unknown_keyword_suggests_the_nearest_valid_name(make, wrong, meant):
    with pytest.raises(KeywordError) as info:
        make(**{wrong: 1})
    assert info.value.suggestion == meant
    assert str(info.value).endswith(f"unexpected keyword argument {wrong!r}. Did you mean {meant}?")


def test_the_signatures_are_unchanged_by_the_check():
    import inspect

    assert "max_steps" in inspect.signature(Trainer).parameters
    assert list(inspect.signature(CheckpointConfig).parameters)[:2] == ["dir", "every"]
    assert "init_scale" in inspect.signature(LossScaler).parameters


def test_fit_without_loss_fn_for_a_model_that_takes_no_targets_says_so():
    model, optimizer = model_and_optimizer()
    trainer = Trainer(model, optimizer, max_steps=1, precision="fp32", device="cpu")
    batches = [(torch.randn(3, 4), torch.randn(3, 2))]
    with pytest.raises(ampkit.ConfigurationError, match=r"^loss: no loss_fn was given") as info:
        trainer.fit(batches)
    assert "does not take a tuple of 2. Pass loss_fn=" in str(info.value)
    assert "\n" not in str(info.value)


def test_an_error_inside_forward_is_not_taken_for_a_batch_mismatch():
    class Broken(nn.Module):
        def forward(self, x, y):
            raise TypeError("the model's own bug")

    model = Broken()
    model.weight = nn.Parameter(torch.ones(1))
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), max_steps=1, device="cpu")
    with pytest.raises(TypeError, match="the model's own bug"):
        trainer.fit([(torch.randn(3, 4), torch.randn(3, 2))])

"""The dtype contract in a real Hugging Face Trainer: a tiny GPT-2 built from a config, saved in
bf16 and loaded back with ``from_pretrained(dtype="auto")`` (as a bf16 checkpoint loads in
transformers v5), trained with ``bf16=True`` and the Trainer's AdamW on the CPU."""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face tests need transformers: pip install 'ampkit[hf]'"
)

from ampkit.errors import ConfigurationError, PrecisionWarning  # noqa: E402
from ampkit.integrations.transformers import AmpkitCallback  # noqa: E402

pytestmark = pytest.mark.slow  # each Trainer run takes a few seconds on two cores


def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1,
        n_embd=16,
        n_head=2,
        vocab_size=32,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def loaded_as_stored(tmp_path, dtype: torch.dtype) -> torch.nn.Module:
    """The model saved in ``dtype`` and loaded back the way transformers v5 loads by default."""
    gpt2().to(dtype).save_pretrained(tmp_path / "ckpt")
    return transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ckpt", dtype="auto")


def run(tmp_path, model, **callback) -> tuple[transformers.Trainer, AmpkitCallback]:
    g = torch.Generator().manual_seed(1)
    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 32, (8, 8), generator=g)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=True,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=4,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
    cb = AmpkitCallback.attach(trainer, **callback)
    trainer.train()
    return trainer, cb


def _contract_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, PrecisionWarning) and "pure bf16" in str(w.message)
    ]


def test_model_left_in_bf16_warns_once_with_the_fix(tmp_path):
    model = loaded_as_stored(tmp_path, torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, cb = run(tmp_path, model)
    (message,) = _contract_warnings(caught)
    assert "AmpkitCallback (bf16=True)" in message and "no fp32 master" in message
    assert "model.float()" in message and "ampkit.Bf16True" in message
    assert cb.contract.kind == "pure-bf16" and cb.contract.master == "none"
    assert cb.contract.optimizer == "AdamW" and cb.contract.autocast == "bf16"
    first = next(row for row in trainer.state.log_history if "loss" in row)
    assert first["ampkit/contract"] == "pure-bf16"
    assert first["ampkit/optimizer_state"] == "bf16"


def test_strict_makes_it_an_error(tmp_path):
    model = loaded_as_stored(tmp_path, torch.bfloat16)
    with pytest.raises(ConfigurationError, match="strict=True"):
        run(tmp_path, model, strict=True)


def test_model_loaded_in_fp32_is_mixed_with_an_fp32_master_and_says_nothing(tmp_path):
    model = loaded_as_stored(tmp_path, torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, cb = run(tmp_path, model, strict=True)
    assert _contract_warnings(caught) == []
    assert cb.contract.kind == "mixed" and cb.contract.master == "fp32 weights"

"""Under precision="auto" the Trainer keeps the MoE routers and the LM head in fp32 by default
(found on the first batch); a keep_fp32 list replaces the default."""

from __future__ import annotations

import os

import pytest
import torch

from ampkit.trainer.trainer import Trainer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow


def mixtral() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    return transformers.MixtralForCausalLM(config)


def data() -> list[dict[str, torch.Tensor]]:
    """Two batches of 4 sequences."""
    g = torch.Generator().manual_seed(0)
    return [
        {"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (2, 4, 16), generator=g)
    ]


def fit(**kwargs):
    model = mixtral()
    dtypes: dict[str, torch.dtype] = {}
    for name in ("model.layers.0.mlp.gate", "lm_head"):

        def record(module, args, out, name=name) -> None:  # the dtype of the first output
            first = out[0] if isinstance(out, tuple) else out
            dtypes.setdefault(name, first.dtype)

        dict(model.named_modules())[name].register_forward_hook(record)
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters()),
        max_steps=1,
        device="cpu",
        batch_size=4,
        **kwargs,
    )
    return trainer.fit(data()), dtypes


def test_auto_keeps_the_router_and_the_head_in_fp32():
    result, dtypes = fit(precision="auto")
    if result.precision == "fp32":
        pytest.skip("auto picks fp32 on this CPU: nothing is low precision")
    assert any("model.layers.0.mlp.gate, lm_head" in n for n in result.notes)
    assert dtypes == {"model.layers.0.mlp.gate": torch.float32, "lm_head": torch.float32}


def test_a_named_precision_and_a_keep_fp32_list_replace_the_default():
    result, dtypes = fit(precision="bf16")
    assert not any("by role" in n for n in result.notes)
    assert dtypes["lm_head"] == torch.bfloat16
    result, dtypes = fit(precision="auto", keep_fp32=["lm_head"])
    assert not any("by role" in n for n in result.notes)
    assert dtypes["lm_head"] == torch.float32

"""to_bf16_true: which modules stay fp32."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import ConfigurationError
from ampkit.models.gpt import GPT, GPTConfig
from ampkit.precision.bf16_true import to_bf16_true


def _gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32))


def test_defaults_keep_embeddings_norms_and_final_projection_in_fp32():
    model = _gpt()
    weight = model.blocks[0].mlp.fc.weight
    kept = to_bf16_true(model)
    assert set(kept) == {"tok_emb", "pos_emb", "blocks.0.ln_1", "blocks.0.ln_2", "ln_f", "head"}
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    for name, dtype in dtypes.items():
        fp32 = name.split(".weight")[0].split(".bias")[0] in kept
        assert dtype == (torch.float32 if fp32 else torch.bfloat16), name
    assert model.blocks[0].mlp.fc.weight is weight  # same Parameter: optimizers still hold it


def test_explicit_keep_overrides_the_defaults():
    model = _gpt()
    assert to_bf16_true(model, ()) == []
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    model = _gpt()
    to_bf16_true(model, [nn.LayerNorm])
    assert model.head.weight.dtype == torch.bfloat16 and model.ln_f.weight.dtype == torch.float32


def test_unknown_module_name_is_refused():
    with pytest.raises(ConfigurationError, match="'nope' is neither a module name"):
        to_bf16_true(_gpt(), ["nope"])

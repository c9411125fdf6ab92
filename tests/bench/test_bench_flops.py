"""The GPT FLOP formula against FlopCounterMode; the peak table and MFU."""

from __future__ import annotations

import pytest
import torch

from ampkit.bench.flops import count_train_flops, gpt_train_flops, mfu, peak_flops
from ampkit.models.gpt import GPT, GPTConfig


@pytest.mark.parametrize(
    ("layers", "width", "heads", "batch", "seq"), [(2, 64, 4, 2, 32), (1, 48, 3, 3, 20)]
)
def test_gpt_formula_matches_flop_counter(layers, width, heads, batch, seq):
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=seq, n_layer=layers, n_head=heads, n_embd=width))
    idx = torch.randint(0, 256, (batch, seq))
    counted = count_train_flops(lambda: model(idx, idx)[1].backward())
    assert counted == gpt_train_flops(model, batch, seq)


def test_attention_term_is_counted():
    torch.manual_seed(0)
    short, long = (GPT(GPTConfig(block_size=s, n_layer=1, n_embd=32, n_head=2)) for s in (16, 32))
    # doubling the sequence at a fixed token count doubles only the attention term
    base_short = gpt_train_flops(short, 4, 16)
    base_long = gpt_train_flops(long, 2, 32)
    assert base_long - base_short == 12 * 1 * 32 * (32 - 16) * 64


@pytest.mark.parametrize(
    ("name", "precision", "tf32", "expected"),
    [
        ("NVIDIA H200", "bf16", False, 989e12),
        ("NVIDIA H100 PCIe", "bf16", False, 756e12),
        ("NVIDIA H100 80GB HBM3", "fp16", False, 989e12),
        ("NVIDIA A100-SXM4-80GB", "fp32", True, 156e12),
        ("NVIDIA A100-SXM4-80GB", "fp32", False, 19.5e12),
        ("Tesla V100-SXM2-16GB", "bf16", False, None),
        ("Some Future GPU", "bf16", False, None),
    ],
)
def test_peak_table(name, precision, tf32, expected):
    assert peak_flops(name, precision, tf32) == expected


def test_mfu():
    assert mfu(400e12, 1.0, 1000e12) == pytest.approx(0.4)
    assert mfu(None, 1.0, 1e12) is None
    assert mfu(1e12, 1.0, None) is None

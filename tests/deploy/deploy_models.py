"""Small models for the export tests; each factory returns ``(model, example_inputs)``.

Factories are importable as ``deploy_models:NAME`` by ``ampkit export --model`` in the tests.
Random-weight classifiers have near-tied logits, where any rounding flips the argmax; the heads
here are scaled up so that, like a trained model's, their top-1 is decisive.
"""

from __future__ import annotations

import torch
from torch import nn


def tiny_gpt() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The built-in GPT, 2 layers of width 64, on 2 sequences of 32 bytes."""
    from ampkit.deploy.sources import GPTLogits
    from ampkit.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPTLogits(GPT(GPTConfig(block_size=32, n_layer=2, n_head=4, n_embd=64)))
    return model, (torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1)),)


class ConvNet(nn.Module):
    """Conv -> BatchNorm -> ReLU, twice, global average pool, linear classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).mean((2, 3)))


def convnet() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    model = ConvNet()
    with torch.no_grad():
        model.head.weight.mul_(20.0)
        for bn in (model.features[1], model.features[4]):  # non-trivial running statistics
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)


def overflowing() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """A linear layer whose outputs (~1e5) overflow fp16, normalised by the LayerNorm after it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))
    with torch.no_grad():
        model[0].weight.mul_(4e4)
        model[3].weight.mul_(10.0)
    return model, (torch.randn(16, 16, generator=torch.Generator().manual_seed(1)),)


def mlp() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, (torch.randn(4, 8),)


class Zeta(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.zeta(x + 2.0, torch.ones_like(x))


def unsupported_op() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """torch.special.zeta has no ONNX translation."""
    return Zeta(), (torch.rand(2, 3),)


class BakedBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(2, -1) * 2.0


def baked_batch() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """``view(2, -1)`` specialises the batch dimension to 2."""
    return BakedBatch(), (torch.rand(2, 3),)


def padded_bert() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A small random BERT masked LM on a tokenizer-like batch: one full row, one right-padded
    and one left-padded (pad id 0), with ``token_type_ids``."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        vocab_size=100, max_position_embeddings=32,
    )  # fmt: skip
    ids = torch.randint(3, 100, (3, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, :3] = 0
    inputs = {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": 0 * ids}
    return transformers.BertForMaskedLM(config), inputs

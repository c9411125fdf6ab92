"""A small GPT-style byte-level language model.

Pre-norm transformer blocks with causal self-attention through
``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient kernels where
the device has them). Under autocast the linear layers and attention run in the low-precision
dtype while LayerNorm, softmax inside SDPA's reference path and the cross-entropy loss run in
fp32, which is the split autocast's op lists make.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ampkit._validate import is_int, is_number
from ampkit.errors import ConfigurationError

__all__ = ["GPT", "GPTConfig", "train_flops"]


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Shape of the built-in GPT.

    Attributes:
        vocab_size: number of token ids (256 for the byte-level corpus).
        block_size: longest sequence the position embedding covers.
        n_layer: transformer blocks.
        n_head: attention heads per block; must divide ``n_embd``.
        n_embd: width of the residual stream.
        dropout: dropout probability (0 keeps runs deterministic).

    Raises:
        ConfigurationError: a size is not an integer >= 1, ``dropout`` is not in [0, 1), or
            ``n_embd`` is not a multiple of ``n_head``.
    """

    vocab_size: int = 256
    block_size: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not is_int(value, 1):
                raise ConfigurationError(
                    f"GPTConfig: {name}={value!r} is invalid. It must be an integer >= 1."
                )
        if not is_number(self.dropout, 0) or self.dropout >= 1:
            raise ConfigurationError(
                f"GPTConfig: dropout={self.dropout!r} is invalid. Use a number in [0, 1)."
            )
        if self.n_embd % self.n_head:
            raise ConfigurationError(
                f"GPTConfig: n_embd={self.n_embd} is not divisible by n_head={self.n_head}. "
                "Pick n_embd as a multiple of n_head."
            )


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused QKV projection."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, seq, self.n_head, width // self.n_head)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(batch, seq, width))


class MLP(nn.Module):
    """The position-wise feed-forward block (4x expansion, GELU)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT language model: ``model(idx, targets)`` returns ``(logits, loss)``.

    ``loss`` is the mean cross-entropy over all positions, computed in fp32 (autocast runs
    ``cross_entropy`` in fp32), or None when ``targets`` is None.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, param in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2: scale residual projections by depth
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        seq = idx.shape[1]
        if seq > self.config.block_size:
            raise ValueError(
                f"GPT: sequence length {seq} exceeds block_size={self.config.block_size}. "
                "Use shorter sequences or a larger block_size."
            )
        pos = torch.arange(seq, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def train_flops(model: nn.Module, batch_size: int, seq_len: int) -> float:
    """Model FLOPs of one training step of the built-in GPT on ``batch_size x seq_len``, in
    closed form (PaLM's appendix B): ``6 * N * tokens + 12 * L * d * T * tokens`` with ``N``
    the matmul parameters (every Linear weight), ``L`` layers, ``d`` the width, ``T`` the
    sequence length.

    ``model`` must have ``config.n_layer`` and ``config.n_embd`` (the built-in :class:`GPT`
    does).
    """
    config: Any = getattr(model, "config")  # noqa: B009 (a GPTConfig; Module has no such attr)
    matmul_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    tokens = batch_size * seq_len
    attention = 12 * config.n_layer * config.n_embd * seq_len
    return float((6 * matmul_params + attention) * tokens)

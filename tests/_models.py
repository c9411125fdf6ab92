"""Test models shared by several test folders (importable as ``_models``: the folder of the
top-level conftest is on ``sys.path``).

* :class:`MoENet`: a hand-written MoE with an LM head, for the roles tests of
  ``ampkit.precision.roles`` and of the doctor.
"""

from __future__ import annotations

import torch
from torch import nn


class MoE(nn.Module):
    """The older layout: ``gate = nn.Linear(hidden, experts)``, top-k in the block."""

    def __init__(self, width: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(width, width) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = torch.topk(self.gate(x).softmax(-1), 2, dim=-1)
        out = torch.zeros_like(x)
        for slot in range(2):
            for e, expert in enumerate(self.experts):
                mask = (chosen[..., slot] == e).unsqueeze(-1)
                out = out + mask * weights[..., slot : slot + 1] * expert(x)
        return out


class MoENet(nn.Module):
    """``inp`` (8 -> 16), :class:`MoE` (router ``moe.gate``, 4 experts of 16, top-2) and
    ``lm_head`` (16 -> 32), from ``torch.manual_seed(0)``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(8, 16)
        self.moe = MoE()
        self.lm_head = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.moe(self.inp(x)))

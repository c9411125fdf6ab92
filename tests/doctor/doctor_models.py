"""Tiny models built to fail in known ways, and a healthy control (shared by the doctor tests)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Case = tuple[nn.Module, Callable[[], torch.Tensor]]


class Trunk(nn.Module):
    """Linear -> ReLU (in place, which full backward hooks would reject) -> LayerNorm."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(8, width)
        self.act = nn.ReLU(inplace=True)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.fc(x)))


class Classifier(nn.Module):
    """trunk -> mid (Linear) -> post (LayerNorm) -> head; ``scale_mid`` inflates mid's weights."""

    def __init__(self, scale_mid: float = 1.0) -> None:
        super().__init__()
        self.trunk = Trunk()
        self.mid = nn.Linear(16, 16)
        self.post = nn.LayerNorm(16)
        self.head = nn.Linear(16, 4)
        with torch.no_grad():
            self.mid.weight.mul_(scale_mid)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.post(self.mid(self.trunk(x))))


def _data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(32, 8, generator=g), torch.randint(0, 4, (32,), generator=g)


def healthy() -> Case:
    torch.manual_seed(0)
    model = Classifier()
    x, y = _data()
    return model, lambda: nn.functional.cross_entropy(model(x), y)


def overflowing() -> Case:
    """``mid``'s activations reach ~1e5 > 65504 (its weights are scaled by 1e5)."""
    torch.manual_seed(0)
    model = Classifier(scale_mid=1e5)
    x, y = _data()
    return model, lambda: nn.functional.cross_entropy(model(x), y)


class WithAux(nn.Module):
    """A classifier with an auxiliary head whose loss weight makes its gradients exactly 1e-9."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = Trunk()
        self.head = nn.Linear(16, 4)
        self.aux = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x)
        return self.head(h), self.aux(h)


def tiny_gradients() -> Case:
    """``aux``'s output gradient is 1e-9 everywhere; the main loss's sum keeps the loss scale
    below 2**16, where 1e-9 * scale is below fp16's smallest normal value."""
    torch.manual_seed(0)
    model = WithAux()
    x, y = _data()

    def closure() -> torch.Tensor:
        logits, aux = model(x)
        return nn.functional.cross_entropy(logits, y, reduction="sum") + 1e-9 * aux.sum()

    return model, closure


class DivBlock(nn.Module):
    """A block that divides by a sum that is zero: inf/NaN from finite inputs, in its own code."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return h / (h - h).sum(dim=-1, keepdim=True)


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Trunk2(), DivBlock(), Trunk2()])
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class Trunk2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(x))


def division_by_zero() -> Case:
    torch.manual_seed(0)
    model = Blocks()
    x, y = _data()
    return model, lambda: nn.functional.cross_entropy(model(x), y)


class Shifted(nn.Module):
    """Computes ``fc(x) + 1000`` and then subtracts the 1000 again: in fp16 (ulp 0.5 at 1000)
    the cancellation keeps little of the O(1) signal."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        with torch.no_grad():
            self.fc.bias.add_(1000.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) - 1000.0


class Cancelling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.shifted = Shifted()
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.shifted(self.stem(x)))


def cancellation() -> Case:
    torch.manual_seed(0)
    model = Cancelling()
    x, y = _data()
    return model, lambda: nn.functional.cross_entropy(model(x), y)


def not_a_case() -> nn.Module:
    """A factory that forgets the closure (for the CLI's error path)."""
    return nn.Linear(2, 2)


class ExpInFp32(nn.Module):
    """Computes ``exp`` of an explicitly fp32 input: its output stays fp32 under autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)
        with torch.no_grad():
            self.fc.bias.fill_(12.0)  # exp(12) ~ 1.6e5 > 65504

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.fc(x).float())


def exp_in_fp32() -> Case:
    torch.manual_seed(0)
    model = nn.Sequential(ExpInFp32(), nn.Linear(16, 4))
    x, y = _data()
    return model, lambda: nn.functional.cross_entropy(model(x), y)

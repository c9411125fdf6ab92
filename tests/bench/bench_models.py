"""Tiny user models for ``--model tests.bench...`` style factory loading (imported by path)."""

from __future__ import annotations

import torch


def tiny(batch_size: int = 8):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs = torch.randn(batch_size, 16)
    targets = torch.randint(0, 4, (batch_size,))
    return model, inputs, targets


def regression():
    model = torch.nn.Linear(8, 2)
    return model, torch.randn(4, 8), torch.randn(4, 2)


def wrong_type():
    return 42


def wrong_tuple():
    return (torch.nn.Linear(2, 2),)


NOT_CALLABLE = 3

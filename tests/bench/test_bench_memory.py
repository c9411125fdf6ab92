"""Saved-for-backward bytes against closed forms."""

from __future__ import annotations

import pytest
import torch

from ampkit.bench.memory import saved_tensor_bytes, state_bytes


def _linear():
    torch.manual_seed(0)
    return torch.nn.Linear(64, 32)


def test_linear_saves_its_input_in_fp32():
    layer = _linear()
    x = torch.randn(16, 64)
    out, saved = saved_tensor_bytes(lambda: layer(x).sum(), exclude=layer.parameters())
    assert saved == x.numel() * 4
    out.backward()  # the hooks left backward intact
    torch.testing.assert_close(layer.weight.grad, torch.ones(16, 32).T @ x)


def test_linear_under_bf16_autocast_saves_a_bf16_copy_of_its_input():
    layer = _linear()
    x = torch.randn(16, 64)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return layer(x).float().sum()

    _, saved = saved_tensor_bytes(forward, exclude=layer.parameters())
    assert saved == x.numel() * 2


def test_input_needing_grad_also_saves_the_weight_which_is_excluded_in_fp32():
    layer = _linear()
    x = torch.randn(16, 64, requires_grad=True)
    _, saved = saved_tensor_bytes(lambda: layer(x).sum(), exclude=layer.parameters())
    assert saved == x.numel() * 4
    _, with_weight = saved_tensor_bytes(lambda: layer(x).sum())
    assert with_weight == x.numel() * 4 + layer.weight.numel() * 4


def test_autocast_weight_copy_is_counted():
    layer = _linear()
    x = torch.randn(16, 64, requires_grad=True)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return layer(x).float().sum()

    _, saved = saved_tensor_bytes(forward, exclude=layer.parameters())
    assert saved == (x.numel() + layer.weight.numel()) * 2


def test_a_tensor_saved_twice_counts_once():
    x = torch.randn(100, requires_grad=True)
    _, saved = saved_tensor_bytes(lambda: (x * x).sum())
    assert saved == 100 * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_state_bytes_counts_parameters_and_adam_state(dtype):
    layer = torch.nn.Linear(8, 4).to(dtype)
    opt = torch.optim.Adam(layer.parameters())
    params = (8 * 4 + 4) * layer.weight.element_size()
    assert state_bytes(layer) == params
    layer(torch.randn(2, 8, dtype=dtype)).sum().backward()
    opt.step()
    # exp_avg and exp_avg_sq per parameter, plus a scalar fp32 step count per parameter
    assert state_bytes(layer, opt) == 3 * params + 2 * 4

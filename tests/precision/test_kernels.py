"""The private fused kernel behind unscaling, checked against plain torch on this version."""

import pytest
import torch

from ampkit.precision._kernels import unscale_and_check_


def _params(*grads: torch.Tensor) -> list[torch.Tensor]:
    params = []
    for grad in grads:
        p = torch.zeros_like(grad, requires_grad=True)
        p.grad = grad.clone()
        params.append(p)
    return params


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_unscale_matches_reference_and_reports_finite(dtype):
    grads = [torch.randn(5, 3).to(dtype) * 1024, torch.randn(7).to(dtype) * 1024]
    params = _params(*grads)
    found = unscale_and_check_(params, 1 / 1024)
    for p, g in zip(params, grads, strict=True):
        torch.testing.assert_close(p.grad, g * (1 / 1024), rtol=0, atol=0)
    assert list(found) == [torch.device("cpu")]
    assert found[torch.device("cpu")].item() == 0.0


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_value_sets_flag(bad):
    grad = torch.ones(10)
    grad[3] = bad
    found = unscale_and_check_(_params(torch.ones(4), grad), 0.5)
    assert found[torch.device("cpu")].item() == 1.0


def test_params_without_grads_are_skipped():
    p = torch.zeros(3, requires_grad=True)
    assert unscale_and_check_([p], 0.5) == {}

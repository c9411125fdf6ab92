"""The built-in job asks for torch's fused AdamW exactly where torch has the kernel."""

from __future__ import annotations

import torch

from ampkit.job.job import _fused_adamw


def _torch_runs_fused(dtype: torch.dtype) -> bool:
    p = torch.nn.Parameter(torch.ones(4, dtype=dtype))
    p.grad = torch.ones_like(p)
    try:
        torch.optim.AdamW([p], fused=True).step()
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def test_fused_is_chosen_where_torch_runs_it_on_the_cpu():
    for dtype in (torch.float32, torch.bfloat16):
        params = [torch.nn.Parameter(torch.ones(3, dtype=dtype))]
        expected = True if _torch_runs_fused(dtype) else None
        assert _fused_adamw(params) is expected
        assert _fused_adamw([{"params": params}]) is expected


def test_no_parameters_or_a_tensor_subclass_keep_the_default():
    class Tagged(torch.Tensor):
        pass

    assert _fused_adamw([]) is None
    assert _fused_adamw([torch.ones(2).as_subclass(Tagged)]) is None

"""State precision of CompensatedOptimizer across optimizers and kernels, and the identity of
the parameters it steps (what DistributedDataParallel's hooks hang on)."""

from __future__ import annotations

import pytest
import torch

from ampkit import CompensatedOptimizer

OPTIMIZERS = {
    "adam": lambda ps, **kw: torch.optim.Adam(ps, lr=1e-3, **kw),
    "adamw": lambda ps, **kw: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1, **kw),
    "sgd-momentum": lambda ps, **kw: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, **kw),
}
KERNELS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def _grads(steps: int, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(n, generator=g).to(torch.bfloat16) for _ in range(steps)]


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fp32_state_equals_the_optimizer_run_in_fp32(name, kernel):
    # Every state tensor of these optimizers depends on the gradients only, so fed the same
    # (bf16) gradients, the wrapped optimizer's fp32 state is bitwise that of a plain fp32 run.
    make, kw = OPTIMIZERS[name], KERNELS[kernel]
    bf16 = torch.nn.Parameter(torch.randn(64).to(torch.bfloat16))
    ref = torch.nn.Parameter(bf16.detach().float())
    wrapped = CompensatedOptimizer(make([bf16], **kw), "kahan", state_precision="fp32")
    plain = make([ref], **kw)
    for grad in _grads(5, 64):
        bf16.grad, ref.grad = grad.clone(), grad.float()
        wrapped.step()
        plain.step()
    ours, theirs = wrapped.state[bf16], plain.state[ref]
    moments = [k for k, v in theirs.items() if torch.is_tensor(v) and v.shape == ref.shape]
    assert moments  # exp_avg/exp_avg_sq or momentum_buffer
    for key in moments:
        assert ours[key].dtype == torch.float32
        assert torch.equal(ours[key], theirs[key]), key
    # the weights: the fp32 run's, stored in bf16 plus a bf16 residual (8 bits of it)
    effective = bf16.float() + ours["compensation"].float()
    torch.testing.assert_close(effective, ref.detach(), rtol=0, atol=1e-4)


@pytest.mark.parametrize("state_precision", ["bf16-stochastic", "bf16-kahan", "bf16"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_bf16_state_stays_bf16_with_foreach_and_fused(name, state_precision):
    for kw in KERNELS.values():
        w = torch.nn.Parameter(torch.randn(32).to(torch.bfloat16))
        opt = CompensatedOptimizer(
            OPTIMIZERS[name]([w], **kw), "kahan", state_precision=state_precision
        )
        for grad in _grads(3, 32):
            w.grad = grad
            opt.step()
        moments = {k: v.dtype for k, v in opt.state[w].items() if k != "step"}
        assert set(moments.values()) == {torch.bfloat16}, (kw, moments)
        assert w.dtype == torch.bfloat16


def test_parameters_and_their_grad_accumulators_survive_a_step():
    # DistributedDataParallel hooks the AccumulateGrad node of each parameter; assigning a
    # tensor of another dtype to param.data makes autograd drop that node (the reducer then
    # waits for gradients that never arrive: "Expected to have finished reduction").
    model = torch.nn.Linear(8, 8).to(torch.bfloat16)
    opt = CompensatedOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-3))

    def accumulator(p: torch.nn.Parameter):
        return p.view_as(p).grad_fn.next_functions[0][0]

    before = [accumulator(p) for p in model.parameters()]
    storages = [p.untyped_storage().data_ptr() for p in model.parameters()]
    model(torch.randn(2, 8, dtype=torch.bfloat16)).float().sum().backward()
    grads = [p.grad for p in model.parameters()]
    opt.step()
    assert all(a is accumulator(p) for a, p in zip(before, model.parameters(), strict=True))
    assert [p.untyped_storage().data_ptr() for p in model.parameters()] == storages
    assert all(p.grad is g for p, g in zip(model.parameters(), grads, strict=True))
    assert [p for g in opt.param_groups for p in g["params"]] == list(model.parameters())
    assert set(opt.state) == set(model.parameters())

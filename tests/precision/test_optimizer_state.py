"""ampkit.precision.optimizer_state: every optimizer-state tensor comes back from a state dict
in the dtype and with the bits it was saved in (torch's load_state_dict casts state to the
parameter's dtype); a bf16-true state lacking its masters is refused by name."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ampkit.errors import CheckpointError
from ampkit.precision.bf16_true import CompensatedOptimizer
from ampkit.precision.bf16_true.casting import to_bf16_true
from ampkit.precision.optimizer_state import load_optimizer_state


class Bf16MomentumSGD(torch.optim.Optimizer):
    """SGD with momentum whose buffer is stored in bf16 (fp32 parameters, bf16 state), as
    low-memory optimizers keep it."""

    def __init__(self, params, lr: float = 0.05, momentum: float = 0.9) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = torch.zeros_like(p, dtype=torch.bfloat16)
                new = buf.float().mul_(group["momentum"]).add_(p.grad)
                buf.copy_(new)
                p.add_(new, alpha=-group["lr"])


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))


def train(net: nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    dtype = next(net.parameters()).dtype
    for _ in range(steps):
        x = torch.randn(4, 8, generator=g).to(dtype)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the fp32 island meets bf16 inputs
            loss = net(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def fp32_bf16_moments():
    net = model()
    return net, Bf16MomentumSGD(net.parameters())


def bf16_true(state_precision: str, compensation: str = "kahan"):
    def build():
        net = model()
        to_bf16_true(net, ["2"])  # the last Linear stays an fp32 island
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        return net, CompensatedOptimizer(opt, compensation, state_precision=state_precision)

    return build


def bf16_params_fp32_state():
    """bf16 parameters whose AdamW state a wrapper keeps fp32 (torch's load would round it)."""
    net = model().bfloat16()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, foreach=False)
    return net, opt


CASES = {
    "fp32 params, bf16 moments": fp32_bf16_moments,
    "bf16-true, fp32 state and Kahan residuals": bf16_true("fp32"),
    "bf16-true, bf16-kahan state": bf16_true("bf16-kahan"),
    "bf16-true, stochastic, bf16-stochastic state": bf16_true("bf16-stochastic", "stochastic"),
}


def state_tensors(opt: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    params = [p for group in opt.param_groups for p in group["params"]]
    return [
        (f"{i}.{key}", value)
        for i, p in enumerate(params)
        for key, value in sorted(opt.state.get(p, {}).items())
        if torch.is_tensor(value)
    ]


def assert_same_state(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    left, right = state_tensors(a), state_tensors(b)
    assert [k for k, _ in left] == [k for k, _ in right]
    for (key, x), (_, y) in zip(left, right, strict=True):
        assert x.dtype == y.dtype, key
        assert torch.equal(x.view(-1).view(torch.uint8), y.view(-1).view(torch.uint8)), key


@pytest.mark.parametrize("case", list(CASES))
def test_resume_keeps_every_state_dtype_and_bit_and_continues_bitwise(case):
    torch.manual_seed(0)
    straight_net, straight = CASES[case]()
    train(straight_net, straight, 3, seed=1)
    saved = copy.deepcopy(straight.state_dict())
    weights = copy.deepcopy(straight_net.state_dict())
    dtypes = {k: v.dtype for k, v in state_tensors(straight)}
    assert len(set(dtypes.values())) >= 1
    cpu_rng = torch.get_rng_state()
    train(straight_net, straight, 2, seed=2)

    resumed_net, resumed = CASES[case]()
    resumed_net.load_state_dict(weights)
    load_optimizer_state(resumed, saved)
    assert {k: v.dtype for k, v in state_tensors(resumed)} == dtypes
    for key, value in state_tensors(resumed):  # the saved bits, exactly
        index, name = key.split(".", 1)
        want = saved["state"][int(index)][name]
        assert torch.equal(value.view(-1).view(torch.uint8), want.view(-1).view(torch.uint8))
    torch.set_rng_state(cpu_rng)  # stochastic rounding draws the same bits
    train(resumed_net, resumed, 2, seed=2)
    assert_same_state(resumed, straight)
    for a, b in zip(resumed_net.parameters(), straight_net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_torchs_own_load_would_change_them():
    """The control: plain load_state_dict promotes the bf16 moments of fp32 parameters."""
    net, opt = fp32_bf16_moments()
    train(net, opt, 1, seed=1)
    _, fresh = fp32_bf16_moments()
    fresh.load_state_dict(opt.state_dict())
    assert {v.dtype for _, v in state_tensors(fresh) if v.dim()} == {torch.float32}
    _, exact = fp32_bf16_moments()
    load_optimizer_state(exact, opt.state_dict())
    assert {v.dtype for _, v in state_tensors(exact) if v.dim()} == {torch.bfloat16}


def test_bf16_params_keep_fp32_state_a_custom_load_wrote():
    net, opt = bf16_params_fp32_state()
    train(net, opt, 1, seed=1)
    state = opt.state_dict()
    for entry in state["state"].values():  # as a wrapper keeping fp32 state would save it
        entry["exp_avg_sq"] = entry["exp_avg_sq"].float() + 1e-9
    _, fresh = bf16_params_fp32_state()
    load_optimizer_state(fresh, state)
    for i, p in enumerate(p for g in fresh.param_groups for p in g["params"]):
        assert fresh.state[p]["exp_avg_sq"].dtype == torch.float32
        assert torch.equal(fresh.state[p]["exp_avg_sq"], state["state"][i]["exp_avg_sq"])


def test_a_checkpoint_without_the_kahan_residuals_is_refused_by_name():
    net, opt = bf16_true("fp32")()
    train(net, opt, 1, seed=1)
    state = copy.deepcopy(opt.state_dict())
    for entry in state["state"].values():
        entry.pop("compensation", None)  # as a tool that saved only the moments writes it
    _, fresh = bf16_true("fp32")()
    with pytest.raises(CheckpointError, match=r"parameter 0 lacks the weight's Kahan residual"):
        fresh.load_state_dict(state)
    assert not fresh.state  # nothing was loaded


def test_fp32_state_saved_in_bf16_is_refused_by_name():
    net, opt = bf16_true("bf16")()
    train(net, opt, 1, seed=1)
    _, fresh = bf16_true("fp32")()
    with pytest.raises(CheckpointError, match=r"exp_avg in fp32 \(saved in bfloat16\)"):
        fresh.load_state_dict(opt.state_dict())


def test_bf16_kahan_state_without_its_residuals_is_refused():
    net, opt = bf16_true("bf16")()
    train(net, opt, 1, seed=1)
    _, fresh = bf16_true("bf16-kahan")()
    with pytest.raises(CheckpointError, match="the residual of exp_avg"):
        fresh.load_state_dict(opt.state_dict())

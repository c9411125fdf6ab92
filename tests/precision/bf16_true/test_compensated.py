"""CompensatedOptimizer and the lost-updates probe against closed-form cases."""

from __future__ import annotations

import pytest
import torch

from ampkit import CompensatedOptimizer, ConfigurationError, lost_update_fraction
from ampkit.precision.bf16_true import stochastic_round_bf16


def _unit_weights(mode: str, n: int = 1000):
    """Weights of magnitude 1, SGD with lr 1e-4 and gradient 1: every update is 1e-4."""
    w = torch.nn.Parameter(torch.ones(n, dtype=torch.bfloat16))
    return w, CompensatedOptimizer(torch.optim.SGD([w], lr=1e-4), mode)


def _steps(w, opt, count: int, measure_first: bool = True):
    lost = None
    for i in range(count):
        w.grad = torch.ones_like(w)
        if i == 0 and measure_first:
            opt.measure_next_step()
        opt.step()
        if i == 0:
            lost = opt.lost_updates({id(w): "w"})
    return lost


def test_plain_bf16_loses_every_update_of_1e4_on_weights_of_1():
    # Just below 1 bf16 values are 2**-8 apart: 1 - 1e-4 rounds back to 1, step after step.
    w, opt = _unit_weights("none")
    lost = _steps(w, opt, 20)
    assert lost.fraction == 1.0 and lost.per_tensor == {"w": 1.0}
    assert lost.alarming
    assert torch.equal(w, torch.ones_like(w))


def test_kahan_loses_none_and_tracks_the_exact_sum():
    w, opt = _unit_weights("kahan")
    lost = _steps(w, opt, 20)
    assert lost.fraction == 0.0 and lost.lost == 0 and lost.wanted == 1000
    effective = w.float() + opt.state[w]["compensation"].float()
    # the residual itself is bf16 (8 significant bits): within 1% of the 2e-3 moved, not exact
    torch.testing.assert_close(effective, torch.full_like(effective, 1 - 20e-4), rtol=0, atol=2e-5)
    assert w.float().mean().item() < 1.0  # the residual carried over into the stored weight
    assert w.dtype == torch.bfloat16 and opt.state[w]["compensation"].dtype == torch.bfloat16


def test_stochastic_rounding_keeps_small_updates_in_expectation():
    torch.manual_seed(0)
    w, opt = _unit_weights("stochastic", n=20_000)
    lost = _steps(w, opt, 50)
    assert lost.fraction > 0.9 and not lost.alarming  # most steps drop it, unbiased overall
    assert abs(w.float().mean().item() - (1 - 50e-4)) < 2e-4


def test_lost_update_fraction_closed_form():
    before = torch.tensor([1.0, 1.0, 1.0, 1.0])
    after = torch.tensor([1.0, 2.0, 1.0, 1.0])
    intended = torch.tensor([0.0, 1.0, 1e-4, -1e-4])
    assert lost_update_fraction(before, after, intended) == pytest.approx(2 / 3)
    assert lost_update_fraction(before, before, torch.zeros(4)) == 0.0
    with pytest.raises(ValueError, match="shapes differ"):
        lost_update_fraction(before, after, torch.zeros(3))


def test_stochastic_round_is_unbiased_and_exact_on_bf16_values():
    exact = torch.tensor([1.0, -2.5, 0.0, 3.0])
    assert torch.equal(stochastic_round_bf16(exact).float(), exact)
    torch.manual_seed(1)
    x = torch.full((100_000,), -(1.0 + 2**-9))  # a quarter of the way to the next bf16 value
    r = stochastic_round_bf16(x).float()
    assert set(r.unique().tolist()) == {-1.0, -(1.0 + 2**-7)}
    assert r.mean().item() == pytest.approx(-(1.0 + 2**-9), abs=1e-4)


@pytest.mark.parametrize(
    ("state_precision", "at_rest"),
    [
        ("fp32", {"exp_avg": torch.float32, "exp_avg_sq": torch.float32}),
        ("bf16", {"exp_avg": torch.bfloat16, "exp_avg_sq": torch.bfloat16}),
        (
            "bf16-kahan",
            {
                "exp_avg": torch.bfloat16,
                "exp_avg_sq": torch.bfloat16,
                "exp_avg_compensation": torch.bfloat16,
                "exp_avg_sq_compensation": torch.bfloat16,
            },
        ),
    ],
)
def test_state_dtype_at_rest_and_exact_round_trip_through_state_dict(state_precision, at_rest):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(torch.bfloat16)

    def optimizer():
        return CompensatedOptimizer(
            torch.optim.AdamW(model.parameters(), lr=1e-3), "kahan", state_precision=state_precision
        )

    opt = optimizer()
    for _ in range(2):
        model(torch.randn(3, 8, dtype=torch.bfloat16)).float().sum().backward()
        opt.step()
        opt.zero_grad()
    state = opt.state[model.weight]
    assert {k: v.dtype for k, v in state.items() if k != "step"} == {
        **at_rest,
        "compensation": torch.bfloat16,
    }
    assert model.weight.dtype == torch.bfloat16
    saved = opt.state_dict()
    fresh = optimizer()
    fresh.load_state_dict(saved)  # torch casts state to the parameter's dtype; fp32 stays fp32
    for key, value in state.items():
        assert fresh.state[model.weight][key].dtype == value.dtype
        assert torch.equal(fresh.state[model.weight][key], value)
    assert (
        fresh.optimizer.state is fresh.state and fresh.optimizer.param_groups is fresh.param_groups
    )


def test_fp32_parameters_are_stepped_exactly_as_without_the_wrapper():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    b.load_state_dict(a.state_dict())
    wrapped = CompensatedOptimizer(torch.optim.AdamW(a.parameters(), lr=1e-2), "kahan")
    plain = torch.optim.AdamW(b.parameters(), lr=1e-2)
    x = torch.randn(5, 4)
    for model, opt in ((a, wrapped), (b, plain)):
        for _ in range(3):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    assert torch.equal(a.weight, b.weight) and "compensation" not in wrapped.state[a.weight]


def test_misuse_is_refused():
    w, opt = _unit_weights("kahan")
    with pytest.raises(ConfigurationError, match="closures are not supported"):
        opt.step(lambda: 0.0)
    with pytest.raises(ConfigurationError, match="already a CompensatedOptimizer"):
        CompensatedOptimizer(opt)
    with pytest.raises(ConfigurationError, match="'kahan', 'stochastic', 'none'"):
        CompensatedOptimizer(torch.optim.SGD([w], lr=1.0), "round")

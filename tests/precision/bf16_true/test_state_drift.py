"""The stored second moment of AdamW under bf16-true against the exact EMA of its gradients.

Closed form: with beta2 = 0.999, ``exp_avg_sq`` after the step on ``g_t`` is
``beta2 * v + (1 - beta2) * g_t**2`` (torch's AdamW, no bias correction stored), computed here
in float64 from the very (bf16) gradients the optimizer saw. The gradients are stationary:
independent normal draws of one scale per element, 2,000 steps.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from ampkit import Bf16True, MixedPrecision
from ampkit.errors import PrecisionWarning

STEPS, N, BETA2 = 2000, 256, 0.999


def _drift(mode: Bf16True | str) -> tuple[torch.Tensor, float]:
    """Stored ``exp_avg_sq`` over the exact EMA per element, and the last step's share of
    state updates rounded away."""
    torch.manual_seed(0)
    mp = MixedPrecision(mode, "cpu")
    weight = torch.nn.Parameter(torch.randn(N).to(torch.bfloat16))
    opt = mp.prepare_optimizer(torch.optim.AdamW([weight], lr=1e-4, betas=(0.9, BETA2)))
    scale = torch.linspace(0.01, 1.0, N)  # one stationary distribution per element
    exact = torch.zeros(N, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        weight.grad = (torch.randn(N, generator=g) * scale).to(torch.bfloat16)
        exact.mul_(BETA2).add_(weight.grad.double() ** 2, alpha=1 - BETA2)
        if step == STEPS - 1:
            opt.measure_next_step()
        opt.step()
    state = opt.state[weight]
    stored = state["exp_avg_sq"].double()
    if "exp_avg_sq_compensation" in state:
        stored = stored + state["exp_avg_sq_compensation"].double()
    lost = opt.lost_updates()
    return stored / exact, lost.state_fraction


def test_default_state_tracks_the_exact_ema_within_one_percent():
    ratio, lost = _drift("bf16-true")
    assert opt_state_dtype("bf16-true") == torch.float32
    assert (ratio - 1).abs().max().item() < 0.01
    assert lost == 0.0


def opt_state_dtype(mode: Bf16True | str) -> torch.dtype:
    mp = MixedPrecision(mode, "cpu")
    w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = mp.prepare_optimizer(torch.optim.AdamW([w]))
    w.grad = torch.ones_like(w)
    opt.step()
    return opt.state[w]["exp_avg_sq"].dtype


def test_bf16_kahan_state_tracks_the_exact_ema_within_one_percent():
    ratio, _ = _drift(Bf16True(state_precision="bf16-kahan"))
    assert opt_state_dtype(Bf16True(state_precision="bf16-kahan")) == torch.bfloat16
    assert (ratio - 1).abs().max().item() < 0.01


def test_stochastic_state_is_unbiased_but_noisy_per_element():
    ratio, lost = _drift(Bf16True(state_precision="bf16-stochastic"))
    assert abs(ratio.mean().item() - 1) < 0.01  # unbiased over the elements
    assert (ratio - 1).abs().max().item() > 0.01  # each element wanders (about +-10%)
    assert lost > 0.1  # most steps round the update away, in expectation kept


def test_round_to_nearest_state_ratchets_up_and_warns():
    with pytest.warns(PrecisionWarning, match="state_precision='bf16'"):
        mode = Bf16True(state_precision="bf16")
    ratio, lost = _drift(mode)
    # decreases (at most 0.1% of v per step) are always under half an ulp: v only goes up
    assert ratio.median().item() > 1.1
    assert lost > 0.1


def test_state_precision_is_checked():
    from ampkit.errors import ConfigurationError

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Bf16True().state_precision == "fp32"
    with pytest.raises(ConfigurationError, match="'fp32', 'bf16-stochastic', 'bf16-kahan'"):
        Bf16True(state_precision="fp16")

"""MixedPrecision driven as the issue's faults did (issue 22 items 5 and 6): PyTorch's AMP
example with two models, two losses and two optimizers; an optimizer over another model; a
string or zero assigned to grad_accum_steps; a per-sample or detached loss. Each is trained
correctly or refused with one typed ampkit error, never a silent no-op or a raw torch error."""

from __future__ import annotations

import copy

import pytest
import torch

from ampkit import AmpkitError, ConfigurationError, LossScaler, MixedPrecision, ScalerStateError

pytestmark = pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")


def _two_models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)


def test_the_amp_example_with_two_optimizers_trains_both_models():
    m0, m1 = _two_models()
    o0, o1 = torch.optim.SGD(m0.parameters(), lr=0.1), torch.optim.SGD(m1.parameters(), lr=0.1)
    before = [copy.deepcopy(m.state_dict()) for m in (m0, m1)]
    mp = MixedPrecision("fp16", "cpu", scaler=LossScaler("cpu", 2.0**8, growth_interval=2))
    x, y = _data()
    for _ in range(2):
        with mp.autocast():
            out0, out1 = m0(x), m1(x)
            loss0 = torch.nn.functional.mse_loss(2 * out0 + 3 * out1, y)
            loss1 = torch.nn.functional.mse_loss(3 * out0 - 5 * out1, y)
        mp.backward([loss0, loss1])
        result = mp.step([o0, o1])
        assert result.stepped
    assert mp.stats.steps == 2 and mp.stats.scale == 2.0**9  # one scale update per iteration
    for model, saved in zip((m0, m1), before, strict=True):
        assert not torch.equal(model.weight, saved["weight"])


def test_stepping_the_second_optimizer_on_its_own_is_one_typed_line():
    m0, m1 = _two_models()
    o0, o1 = torch.optim.SGD(m0.parameters(), lr=0.1), torch.optim.SGD(m1.parameters(), lr=0.1)
    mp = MixedPrecision("fp32", "cpu")
    x, y = _data()
    mp.backward(torch.nn.functional.mse_loss(m0(x) + m1(x), y))
    assert mp.step(o0).stepped
    with pytest.raises(ScalerStateError) as caught:
        mp.step(o1)
    assert "\n" not in str(caught.value) and "mp.step([optimizer0, optimizer1])" in str(
        caught.value
    )


def test_an_optimizer_over_another_model_is_refused_not_reported_as_stepped():
    m0, m1 = _two_models()
    mp = MixedPrecision("fp32", "cpu")
    x, y = _data()
    mp.backward(torch.nn.functional.mse_loss(m0(x), y))
    with pytest.raises(ConfigurationError, match="received a gradient"):
        mp.step(torch.optim.SGD(m1.parameters(), lr=0.1))


@pytest.mark.parametrize("value", ["2", 0])
def test_grad_accum_steps_assigned_a_bad_value_is_refused_with_the_constructors_message(value):
    mp = MixedPrecision("fp32", "cpu")
    with pytest.raises(ConfigurationError, match=rf"grad_accum_steps: {value!r} is invalid"):
        mp.grad_accum_steps = value


@pytest.mark.parametrize("kind", ["per-sample", "detached"])
def test_a_loss_backward_cannot_use_is_a_typed_error(kind):
    m0, _ = _two_models()
    mp = MixedPrecision("fp32", "cpu")
    x, y = _data()
    if kind == "per-sample":
        loss = torch.nn.functional.mse_loss(m0(x), y, reduction="none").mean(dim=1)
        match = r"shape \(16,\), not a scalar"
    else:
        loss = torch.nn.functional.mse_loss(m0(x), y).detach()
        match = "requires_grad=False"
    with pytest.raises(AmpkitError, match=match):
        mp.backward(loss)

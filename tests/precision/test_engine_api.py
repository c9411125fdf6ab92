"""MixedPrecision's API edges: several optimizers per iteration (PyTorch's AMP example with two
models, two losses and two optimizers, bitwise against ``torch.amp.GradScaler``), an optimizer
that received no gradient, ``grad_accum_steps`` assigned, and losses backward cannot use."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch

from ampkit import ConfigurationError, LossScaler, MixedPrecision, ScalerStateError

pytestmark = pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")

WIDE = {"min_scale": 2.0**-24, "max_scale": 2.0**40}
#: 'x': an inf is injected into a gradient at that iteration.
PATTERN = "..x...x.x.....xx...."


def _models() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [
        torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        for _ in range(2)
    ]


def _parts() -> tuple[list[torch.nn.Module], list[torch.optim.Optimizer]]:
    models = _models()
    return models, [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)


def _losses(m0: Any, m1: Any, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _batch(step)
    out0, out1 = m0(x), m1(x)
    loss0 = torch.nn.functional.mse_loss(2 * out0 + 3 * out1, y)
    loss1 = torch.nn.functional.mse_loss(3 * out0 - 5 * out1, y)
    return loss0, loss1


def _inject(*models: torch.nn.Module) -> None:
    for model in models:
        next(model.parameters()).grad[0, 0] = math.inf


def _gradscaler_run(inject_into: str) -> tuple[list[torch.nn.Module], list[float]]:
    (m0, m1), (o0, o1) = _parts()
    scaler = torch.amp.GradScaler("cpu", 2.0**10, 2.0, 0.5, 3, True)
    scales = []
    for step, mark in enumerate(PATTERN):
        with torch.autocast("cpu", dtype=torch.float16):
            loss0, loss1 = _losses(m0, m1, step)
        scaler.scale(loss0).backward(retain_graph=True)
        scaler.scale(loss1).backward()
        if mark == "x":
            _inject(*[m for m, name in ((m0, "0"), (m1, "1")) if name in inject_into])
        scaler.unscale_(o0)
        torch.nn.utils.clip_grad_norm_([*m0.parameters(), *m1.parameters()], 1e9)
        scaler.step(o0)
        scaler.step(o1)
        scaler.update()
        o0.zero_grad(set_to_none=True)
        o1.zero_grad(set_to_none=True)
        scales.append(scaler.get_scale())
    return [m0, m1], scales


def _engine_run(inject_into: str) -> tuple[list[torch.nn.Module], list[Any]]:
    (m0, m1), (o0, o1) = _parts()
    scaler = LossScaler("cpu", 2.0**10, 2.0, 0.5, 3, True, **WIDE)
    mp = MixedPrecision("fp16", "cpu", scaler=scaler, max_grad_norm=1e9)
    results = []
    for step, mark in enumerate(PATTERN):
        with mp.autocast():
            loss0, loss1 = _losses(m0, m1, step)
        mp.backward([loss0, loss1])
        if mark == "x":
            _inject(*[m for m, name in ((m0, "0"), (m1, "1")) if name in inject_into])
        results.append(mp.step([o0, o1]))
    return [m0, m1], results


def test_two_optimizers_step_bitwise_like_gradscaler():
    theirs, their_scales = _gradscaler_run(inject_into="01")
    ours, results = _engine_run(inject_into="01")
    assert [r.scale for r in results] == their_scales
    assert [r.skipped for r in results] == [m == "x" for m in PATTERN]
    assert len(set(their_scales)) > 2  # backoff and growth both happened
    for a, b in zip(ours, theirs, strict=True):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(x, y), name
    assert all(p.grad is None for m in ours for p in m.parameters())


def test_one_optimizers_inf_skips_every_optimizer_of_the_iteration():
    (m0, m1), (o0, o1) = _parts()
    mp = MixedPrecision("fp16", "cpu", scaler=LossScaler("cpu", 2.0**10, **WIDE))
    with mp.autocast():
        mp.backward(list(_losses(m0, m1, 0)))
    before = [copy.deepcopy(m.state_dict()) for m in (m0, m1)]
    _inject(m1)  # only model 1 overflows; GradScaler would still step optimizer 0
    result = mp.step([o0, o1])
    assert result.skipped and not result.stepped
    assert result.scale == 2.0**9 and mp.stats.steps == 1 and mp.stats.skipped_steps == 1
    for model, saved in zip((m0, m1), before, strict=True):
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, saved[name]), name
    assert o0.state == {} and o1.state == {}


def test_two_optimizers_with_accumulation_update_the_scale_once_per_window():
    (m0, m1), (o0, o1) = _parts()
    scaler = LossScaler("cpu", 2.0**10, growth_interval=1, **WIDE)
    mp = MixedPrecision("fp16", "cpu", scaler=scaler, grad_accum_steps=2)
    results = []
    for step in range(4):
        with mp.autocast():
            mp.backward(list(_losses(m0, m1, step)))
        results.append(mp.step([o0, o1]))
    assert [r.stepped for r in results] == [False, True, False, True]
    assert mp.stats.steps == 2 and mp.stats.scale == 2.0**12
    assert all(len(o.state) == 4 for o in (o0, o1))  # every parameter stepped


def test_a_second_optimizer_stepped_on_its_own_is_refused_saying_how():
    (m0, m1), (o0, o1) = _parts()
    mp = MixedPrecision("fp32", "cpu")
    mp.backward(list(_losses(m0, m1, 0)))
    mp.step(o0)
    with pytest.raises(ScalerStateError, match=r"mp\.step\(\[optimizer0, optimizer1\]\)"):
        mp.step(o1)


def test_several_backward_calls_for_one_micro_batch_say_how():
    (m0, m1), _ = _parts()
    mp = MixedPrecision("fp32", "cpu")
    loss0, loss1 = _losses(m0, m1, 0)
    mp.backward(loss0, retain_graph=True)
    with pytest.raises(ScalerStateError, match=r"mp\.backward\(\[loss0, loss1\]\)"):
        mp.backward(loss1)


def test_an_optimizer_over_another_model_is_refused():
    (m0, m1), (o0, o1) = _parts()
    mp = MixedPrecision("fp32", "cpu")
    x, y = _batch(0)
    mp.backward(torch.nn.functional.mse_loss(m0(x), y))
    before = copy.deepcopy(m1.state_dict())
    with pytest.raises(ConfigurationError, match="none of the 4 parameters .* received a grad"):
        mp.step(o1)
    assert all(torch.equal(t, before[k]) for k, t in m1.state_dict().items())
    assert m0[0].weight.grad is not None  # nothing was cleared: the run can be fixed
    assert mp.step(o0).stepped


@pytest.mark.parametrize("value", ["2", 0, -1, 2.0, True, None])
def test_grad_accum_steps_is_checked_on_assignment_as_in_the_constructor(value):
    with pytest.raises(ConfigurationError) as built:
        MixedPrecision("fp32", "cpu", grad_accum_steps=value)
    mp = MixedPrecision("fp32", "cpu")
    with pytest.raises(ConfigurationError) as assigned:
        mp.grad_accum_steps = value
    assert str(assigned.value) == str(built.value)
    assert mp.grad_accum_steps == 1


def test_grad_accum_steps_may_change_between_windows_only():
    (m0, m1), (o0, _) = _parts()
    mp = MixedPrecision("fp32", "cpu", grad_accum_steps=2)
    x, y = _batch(0)
    mp.backward(torch.nn.functional.mse_loss(m0(x), y))
    with pytest.raises(ScalerStateError, match="middle of an accumulation window"):
        mp.grad_accum_steps = 4
    mp.backward(torch.nn.functional.mse_loss(m0(x), y))
    assert mp.step(o0).stepped
    mp.grad_accum_steps = 4
    assert mp.grad_accum_steps == 4


def test_a_non_scalar_loss_is_a_typed_error_naming_its_shape():
    (m0, _), _ = _parts()
    mp = MixedPrecision("fp32", "cpu")
    x, y = _batch(0)
    per_element = torch.nn.functional.mse_loss(m0(x), y, reduction="none")
    with pytest.raises(ConfigurationError, match=r"shape \(16, 4\), not a scalar"):
        mp.backward(per_element)
    assert mp.micro_step == 0 and m0[0].weight.grad is None


def test_a_loss_without_grad_is_a_typed_error_naming_requires_grad():
    (m0, _), _ = _parts()
    mp = MixedPrecision("fp32", "cpu")
    x, y = _batch(0)
    with torch.no_grad():
        loss = torch.nn.functional.mse_loss(m0(x), y)
    with pytest.raises(ConfigurationError, match="requires_grad=False"):
        mp.backward(loss)
    assert mp.micro_step == 0

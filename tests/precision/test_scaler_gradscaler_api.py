"""LossScaler has every public method of ``torch.amp.GradScaler`` and behaves as it does:
settings getters/setters, scaling of nested iterables in fp32, ``update(new_scale)``, the
optimizer's return value from ``step``, optimizers that unscale themselves
(``_step_supports_amp_scaling``), the refusal of fp16 gradients, large initial scales and
pickling. Each behaviour is checked against GradScaler itself where GradScaler can run."""

from __future__ import annotations

import math
import pickle
import warnings
from typing import Any

import pytest
import torch

from ampkit import ConfigurationError, LossScaler


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 2))


def _backward(model: torch.nn.Module, scaler: Any, step: int) -> None:
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(5, 6, generator=g), torch.randn(5, 2, generator=g)
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
    scaler.scale(torch.nn.functional.mse_loss(out.float(), y)).backward()


def test_settings_getters_and_setters_match_gradscaler():
    ours = LossScaler(
        "cpu", init_scale=3.0, growth_factor=4.0, backoff_factor=0.5, growth_interval=2
    )
    theirs = torch.amp.GradScaler(
        "cpu", init_scale=3.0, growth_factor=4.0, backoff_factor=0.5, growth_interval=2
    )
    for scaler in (ours, theirs):
        scaler.set_growth_factor(8.0)
        scaler.set_backoff_factor(0.25)
        scaler.set_growth_interval(5)
    for name in ("get_scale", "get_growth_factor", "get_backoff_factor", "get_growth_interval"):
        assert getattr(ours, name)() == getattr(theirs, name)(), name
    assert (ours.get_growth_factor(), ours.get_backoff_factor(), ours.get_growth_interval()) == (
        8.0,
        0.25,
        5,
    )


@pytest.mark.parametrize(
    ("setter", "value"),
    [("set_growth_factor", 1.0), ("set_backoff_factor", 1.5), ("set_growth_interval", 0)],
)
def test_setter_out_of_range_raises_and_changes_nothing(setter, value):
    scaler = LossScaler()
    before = (scaler.get_growth_factor(), scaler.get_backoff_factor(), scaler.get_growth_interval())
    with pytest.raises(ConfigurationError, match=setter.removeprefix("set_")):
        getattr(scaler, setter)(value)
    after = (scaler.get_growth_factor(), scaler.get_backoff_factor(), scaler.get_growth_interval())
    assert after == before


def test_scale_of_nested_iterables_has_gradscalers_structure_and_values():
    ours, theirs = LossScaler("cpu", init_scale=8.0), torch.amp.GradScaler("cpu", init_scale=8.0)
    a, b, c = torch.tensor(1.5), torch.tensor([2.0, -3.0]), torch.tensor(0.25)
    nested = [a, (b, [c])]
    got, want = ours.scale(nested), theirs.scale(nested)
    assert type(got) is list and type(got[1]) is tuple and type(got[1][1]) is list
    assert torch.equal(got[0], want[0]) and torch.equal(got[1][0], want[1][0])
    assert torch.equal(got[1][1][0], want[1][1][0]) and torch.equal(got[0], a * 8)
    lazy = ours.scale(x for x in (a, c))  # other iterables come back lazily, as GradScaler's
    assert [t.item() for t in lazy] == [12.0, 2.0]


def test_scale_of_a_non_tensor_raises_value_error():
    with pytest.raises(ValueError, match="tensor"):
        LossScaler().scale([torch.tensor(1.0), 3.0])


@pytest.mark.parametrize("shape", [(), (4,)])
def test_scaled_output_dtype_is_gradscalers(shape):
    # A 0-dim fp16 loss comes back fp32 (65536 * loss would be inf in fp16), as GradScaler's.
    loss = torch.full(shape, 2.0, dtype=torch.float16)
    got = LossScaler("cpu").scale(loss)
    want = torch.amp.GradScaler("cpu").scale(loss)
    assert got.dtype == want.dtype and torch.equal(got, want)
    if shape == ():
        assert got.dtype == torch.float32 and math.isfinite(got.item())


def test_update_with_new_scale_sets_it_from_a_float_or_a_tensor():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = LossScaler("cpu", init_scale=2.0**10, growth_interval=1)
    _backward(model, scaler, 0)
    scaler.step(opt)
    scaler.update(64.0)
    assert scaler.get_scale() == 64.0 and scaler.stats.steps == 1  # the step is still counted
    scaler.update(torch.tensor([512.0]))  # no step needed, as with GradScaler
    assert scaler.get_scale() == 512.0 and scaler.stats.steps == 1
    assert scaler.stats.scale_history[-2:] == ((1, 64.0), (1, 512.0))


@pytest.mark.parametrize(
    "new_scale",
    [torch.tensor([2.0, 4.0]), torch.tensor(8.0, requires_grad=True), 0.0, math.nan, 2.0**30],
)
def test_update_with_a_bad_new_scale_raises_value_error(new_scale):
    scaler = LossScaler("cpu", max_scale=2.0**24)
    with pytest.raises(ValueError, match="new_scale"):
        scaler.update(new_scale)
    assert scaler.get_scale() == 2.0**16


class _Counting(torch.optim.SGD):
    """SGD whose step returns how many times it ran."""

    calls = 0

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        super().step(closure)
        self.calls += 1
        return self.calls


def test_step_returns_the_optimizers_return_value_and_none_when_skipped():
    model = _model()
    opt = _Counting(model.parameters(), lr=0.1)
    scaler = LossScaler("cpu")
    _backward(model, scaler, 0)
    assert scaler.step(opt) == 1
    scaler.update()
    _backward(model, scaler, 1)
    model[0].weight.grad[0, 0] = math.inf
    assert scaler.step(opt) is None and opt.calls == 1
    scaler.update()
    assert scaler.last_step_skipped
    disabled = LossScaler(enabled=False)
    _backward(model, disabled, 2)
    assert disabled.step(opt) == 2


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_fused_optimizer_unscales_itself_bitwise_like_with_gradscaler(optimizer):
    # Fused optimizers set _step_supports_amp_scaling: the scaler must hand them grad_scale and
    # found_inf and not unscale behind their back, or the weights differ from GradScaler's.
    runs = []
    for scaler in (
        LossScaler("cpu", init_scale=2.0**12, growth_interval=2),
        torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2),
    ):
        model = _model()
        if optimizer == "adam":
            opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, fused=True)
        assert opt._step_supports_amp_scaling  # type: ignore[attr-defined]
        scales = []
        for step, ch in enumerate("..x..x...."):
            _backward(model, scaler, step)
            if ch == "x":
                model[2].bias.grad[0] = math.inf
            if step == 4:
                scaler.unscale_(opt)  # then the optimizer gets grad_scale=None
            scaler.step(opt)
            assert not hasattr(opt, "grad_scale") and not hasattr(opt, "found_inf")
            scaler.update()
            opt.zero_grad(set_to_none=True)
            scales.append(scaler.get_scale())
        runs.append((scales, [p.detach().clone() for p in model.parameters()]))
    (ours, our_params), (theirs, their_params) = runs
    assert ours == theirs
    for p, q in zip(our_params, their_params, strict=True):
        assert torch.equal(p, q)


def test_optimizer_taking_grad_scaler_gets_the_scaler_with_a_future_warning():
    seen: dict[str, Any] = {}

    class TakesScaler(torch.optim.SGD):
        _step_supports_amp_scaling = True

        def step(self, closure: Any = None, *, grad_scaler: Any = None) -> Any:  # type: ignore[override]
            seen["scaler"] = grad_scaler
            seen["attrs"] = hasattr(self, "grad_scale") or hasattr(self, "found_inf")
            grad_scaler.unscale_(self)
            return super().step(closure)

    model = _model()
    opt = TakesScaler(model.parameters(), lr=0.1)
    scaler = LossScaler("cpu", init_scale=4.0)
    _backward(model, scaler, 0)
    with pytest.warns(FutureWarning, match="grad_scaler"):
        scaler.step(opt)
    scaler.update()
    assert seen == {"scaler": scaler, "attrs": False} and not scaler.last_step_skipped


def test_unscaling_fp16_gradients_raises_value_error_like_gradscaler():
    model = _model().half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 6, dtype=torch.float16)
    for scaler in (LossScaler("cpu"), torch.amp.GradScaler("cpu")):
        opt.zero_grad()
        scaler.scale(model(x).float().sum()).backward()
        with pytest.raises(ValueError, match="(?i)fp16"):
            scaler.unscale_(opt)


def test_init_scale_above_the_default_bound_widens_it_as_gradscaler_accepts_it():
    scaler = LossScaler("cpu", init_scale=2.0**25, growth_interval=1)
    assert scaler.get_scale() == 2.0**25 and scaler.max_scale == 2.0**25
    small = LossScaler("cpu", init_scale=0.5)
    assert small.min_scale == 0.5
    with pytest.raises(ConfigurationError, match="max_scale="):
        LossScaler("cpu", init_scale=2.0**25, max_scale=2.0**24)


def test_scale_stays_finite_in_fp32_when_growth_would_overflow_it():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = LossScaler("cpu", init_scale=1e38, growth_factor=16.0, growth_interval=1)
    for _ in range(3):
        opt.zero_grad()
        scaler.scale(model(torch.randn(2, 6)).mean() * 1e-38).backward()
        scaler.step(opt)
        scaler.update()
        assert math.isfinite(scaler.get_scale()) and scaler.get_scale() <= 1e38


def test_pickled_mid_run_scaler_continues_like_the_original():
    def run(pickle_at: int | None) -> list[float]:
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = LossScaler("cpu", init_scale=2.0**8, growth_interval=1)
        scales = []
        for step, ch in enumerate("..x.x..."):
            _backward(model, scaler, step)
            if ch == "x":
                model[0].bias.grad[0] = math.nan
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            if step == pickle_at:
                scaler = pickle.loads(pickle.dumps(scaler))
            scales.append(scaler.get_scale())
        return scales + [float(p.detach().sum()) for p in model.parameters()]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run(pickle_at=3) == run(pickle_at=None)

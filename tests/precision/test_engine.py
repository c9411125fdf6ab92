"""MixedPrecision: the step order, control runs against plain PyTorch, accumulation, state."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch

from ampkit import (
    CheckpointError,
    ConfigurationError,
    LossScaler,
    MixedPrecision,
    PrecisionWarning,
    ScalerStateError,
)

fp16_on_cpu = pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 4)
    )


def batch(step: int, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(size, 16, generator=g), torch.randint(0, 4, (size,), generator=g)


def loss_fn(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(x), y)


def plain_loop(steps: int, max_norm: float | None) -> torch.nn.Module:
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        x, y = batch(step)
        loss_fn(model, x, y).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model


def engine_loop(mp: MixedPrecision, steps: int, micro: int = 1, size: int = 8) -> torch.nn.Module:
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        x, y = batch(step, size)
        for xm, ym in zip(x.chunk(micro), y.chunk(micro), strict=True):
            with mp.accumulate(model):
                with mp.autocast():
                    loss = loss_fn(model, xm, ym)
                mp.backward(loss)
            result = mp.step(opt)
        assert result.stepped
    return model


def assert_same(a: torch.nn.Module, b: torch.nn.Module, **tol: float) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        if tol:
            torch.testing.assert_close(p, q, **tol, msg=name)
        else:
            assert torch.equal(p, q), name


@pytest.mark.parametrize("max_norm", [None, 0.5])
def test_fp32_is_bitwise_identical_to_plain_pytorch_loop(max_norm):
    expected = plain_loop(6, max_norm)
    got = engine_loop(MixedPrecision("fp32", "cpu", max_grad_norm=max_norm), 6)
    assert_same(got, expected)


@fp16_on_cpu
def test_fp16_with_scaler_matches_fp32_control():
    expected = plain_loop(6, None)
    got = engine_loop(MixedPrecision("fp16", "cpu"), 6)
    assert_same(got, expected, rtol=0, atol=2e-3)


def test_bf16_matches_fp32_control_loosely():
    expected = plain_loop(6, None)
    got = engine_loop(MixedPrecision("bf16", "cpu"), 6)
    assert_same(got, expected, rtol=0, atol=2e-2)


def test_accumulation_equals_the_full_batch():
    full = engine_loop(MixedPrecision("fp32", "cpu"), 5, micro=1, size=8)
    accumulated = engine_loop(MixedPrecision("fp32", "cpu", grad_accum_steps=4), 5, micro=4, size=8)
    assert_same(accumulated, full, rtol=1e-5, atol=1e-6)


def test_non_final_micro_batches_do_not_step():
    mp = MixedPrecision("fp32", "cpu", grad_accum_steps=3)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = copy.deepcopy(model.state_dict())
    results = []
    for i in range(3):
        x, y = batch(i)
        mp.backward(loss_fn(model, x, y))
        results.append(mp.step(opt))
        if i < 2:
            assert torch.equal(model[0].weight, before["0.weight"])
            assert model[0].weight.grad is not None
    assert [r.stepped for r in results] == [False, False, True]
    assert [r.micro_step for r in results] == [1, 2, 3]
    assert model[0].weight.grad is None  # zero_grad(set_to_none=True) after the step


@fp16_on_cpu
def test_overflow_skips_step_and_leaves_weights_bitwise_untouched():
    mp = MixedPrecision("fp16", "cpu", max_grad_norm=1.0)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = batch(0)
    with mp.autocast():
        mp.backward(loss_fn(model, x, y))
    mp.step(opt)
    weights, state = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    scale = mp.stats.scale
    with mp.autocast():
        mp.backward(loss_fn(model, x, y))
    model[0].weight.grad[0, 0] = math.nan
    result = mp.step(opt)
    assert result.skipped and not result.stepped
    assert result.scale == scale / 2 and mp.stats.skipped_steps == 1
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    torch.testing.assert_close(opt.state_dict(), state, rtol=0, atol=0)
    assert all(p.grad is None for p in model.parameters())


def test_grad_norm_is_the_unscaled_norm_before_clipping():
    model = make_model()
    x, y = batch(0)
    loss_fn(model, x, y).backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    model.zero_grad()
    mp = MixedPrecision("fp32", "cpu", max_grad_norm=1e-3)
    mp.backward(loss_fn(model, x, y))
    result = mp.step(torch.optim.SGD(model.parameters(), lr=0.0))
    assert result.grad_norm == pytest.approx(float(expected), rel=1e-6)


@fp16_on_cpu
def test_fp16_grad_norm_is_unscaled():
    mp = MixedPrecision("fp16", "cpu", max_grad_norm=1e9, scaler=LossScaler(init_scale=2.0**14))
    model = make_model()
    x, y = batch(0)
    with mp.autocast():
        mp.backward(loss_fn(model, x, y))
    result = mp.step(torch.optim.SGD(model.parameters(), lr=0.0))
    assert 1e-3 < result.grad_norm < 100  # scaled, it would be ~1e4 times larger


def test_scheduler_steps_only_when_the_optimizer_stepped():
    mp = MixedPrecision("fp32", "cpu", grad_accum_steps=2)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
        for i in range(4):
            x, y = batch(i)
            mp.backward(loss_fn(model, x, y))
            mp.step(opt, sched)
    assert sched.last_epoch == 2 and opt.param_groups[0]["lr"] == 0.25


@fp16_on_cpu
def test_skipped_step_does_not_advance_scheduler():
    mp = MixedPrecision("fp16", "cpu")
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = batch(0)
    mp.backward(loss_fn(model, x, y) * math.inf)
    assert mp.step(opt, sched).skipped
    assert sched.last_epoch == 0


@fp16_on_cpu
def test_state_dict_round_trip_mid_window_resumes_bitwise():
    def make(mp_state=None):
        scaler = LossScaler(growth_interval=2, init_scale=2.0**10)
        mp = MixedPrecision("fp16", "cpu", grad_accum_steps=2, scaler=scaler)
        if mp_state is not None:
            mp.load_state_dict(mp_state)
        return mp

    def micro_steps(mp, model, opt, start, stop):
        for i in range(start, stop):
            x, y = batch(i)
            with mp.autocast():
                mp.backward(loss_fn(model, x, y) * (math.inf if i == 5 else 1.0))
            mp.step(opt)

    straight_mp, straight = make(), make_model()
    straight_opt = torch.optim.AdamW(straight.parameters(), lr=1e-2)
    micro_steps(straight_mp, straight, straight_opt, 0, 12)

    mp, model = make(), make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    micro_steps(mp, model, opt, 0, 7)  # stop in the middle of a window: a grad is pending
    saved = copy.deepcopy((mp.state_dict(), model.state_dict(), opt.state_dict()))
    grads = [p.grad.clone() for p in model.parameters()]
    assert saved[0]["micro_step"] == 1

    resumed_mp, resumed = make(saved[0]), make_model(seed=99)
    resumed.load_state_dict(saved[1])
    for p, g in zip(resumed.parameters(), grads, strict=True):
        p.grad = g
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    resumed_opt.load_state_dict(saved[2])
    micro_steps(resumed_mp, resumed, resumed_opt, 7, 12)
    assert_same(resumed, straight)
    assert resumed_mp.state_dict() == straight_mp.state_dict()
    assert straight_mp.stats.skipped_steps == 1


def test_load_state_from_other_precision_raises():
    state = MixedPrecision("fp32", "cpu").state_dict()
    with pytest.raises(CheckpointError, match="precision"):
        MixedPrecision("bf16", "cpu").load_state_dict(state)


def test_backward_more_often_than_window_raises():
    mp = MixedPrecision("fp32", "cpu", grad_accum_steps=1)
    model = make_model()
    x, y = batch(0)
    mp.backward(loss_fn(model, x, y))
    with pytest.raises(ScalerStateError, match="without step"):
        mp.backward(loss_fn(model, x, y))


def test_step_without_backward_raises():
    mp = MixedPrecision("fp32", "cpu")
    with pytest.raises(ScalerStateError, match="no backward"):
        mp.step(torch.optim.SGD(make_model().parameters(), lr=0.1))


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"grad_accum_steps": 0}, "grad_accum_steps"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"max_grad_norm": -1.0}, "max_grad_norm"),
        ({"scaler": "fp16"}, "scaler"),
    ],
)
def test_bad_arguments_raise(kwargs, flag):
    with pytest.raises(ConfigurationError, match=flag):
        MixedPrecision("fp32", "cpu", **kwargs)


@fp16_on_cpu
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_scaler_passed_without_fp16_raises(precision):
    with pytest.raises(ConfigurationError, match="needs no loss scaling"):
        MixedPrecision(precision, "cpu", scaler=LossScaler())


@fp16_on_cpu
def test_injected_scaler_is_used_and_a_disabled_one_refused():
    scaler = LossScaler(init_scale=2.0**5)
    mp = MixedPrecision("fp16", "cpu", scaler=scaler)
    assert mp.scaler is scaler and mp.stats.scale == 2.0**5
    with pytest.raises(ConfigurationError, match="enabled=False"):
        MixedPrecision("fp16", "cpu", scaler=LossScaler(enabled=False))


def test_accumulate_enters_no_sync_on_non_final_micro_batches_only():
    import contextlib

    class DDPLike(torch.nn.Linear):
        """A module with DDP's ``no_sync`` contract: a context manager switching sync off."""

        def __init__(self) -> None:
            super().__init__(2, 2)
            self.syncing = True

        @contextlib.contextmanager
        def no_sync(self):
            self.syncing = False
            try:
                yield
            finally:
                self.syncing = True

    model = DDPLike()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp32", "cpu", grad_accum_steps=3)
    synced = []
    for _ in range(6):
        with mp.accumulate(model):
            mp.backward(model(torch.ones(1, 2)).sum())
            synced.append(model.syncing)
        mp.step(opt)
    assert synced == [False, False, True] * 2
    assert model.syncing


def test_session_restores_settings_and_refuses_nesting():
    mp = MixedPrecision("fp32", "cpu")
    with mp, pytest.raises(ScalerStateError, match="already open"):
        mp.__enter__()
    mp.close()  # idempotent


def test_policy_and_stats_are_exposed():
    mp = MixedPrecision("bf16", "cpu")
    assert mp.policy.precision == "bf16" and mp.policy.compute_dtype == torch.bfloat16
    assert not mp.policy.uses_scaler and mp.stats.scale == 1.0


# -- model outputs, parameter dtypes, warnings ---------------------------------------------


def test_backward_takes_an_output_with_loss_or_a_loss_dict():
    grads = []
    for wrap in (lambda t: t, lambda t: {"loss": t, "logits": None}, lambda t: _Output(t)):
        model = make_model()
        x, y = batch(0)
        mp = MixedPrecision("fp32", "cpu")
        mp.backward(wrap(loss_fn(model, x, y)))
        grads.append([p.grad.clone() for p in model.parameters()])
    for other in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], other, strict=True))


class _Output:
    def __init__(self, loss: torch.Tensor) -> None:
        self.loss = loss


@pytest.mark.parametrize(
    ("value", "needle"),
    [({"logits": torch.ones(2)}, "got a dict."), (_Output(None), "whose loss is None")],
)
def test_backward_without_a_loss_is_a_configuration_error(value, needle):
    with pytest.raises(ConfigurationError, match="mp.backward") as info:
        MixedPrecision("fp32", "cpu").backward(value)
    assert needle in str(info.value) and "mp.backward(outputs.loss)" in str(info.value)


@fp16_on_cpu
@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("fp16", torch.float16), ("fp16", torch.bfloat16), ("bf16", torch.bfloat16)],
)
def test_low_precision_weights_are_refused_at_the_first_step(precision, dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    model = model.to(dtype)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision(precision, "cpu")
    x, y = batch(0)
    with mp.autocast():
        mp.backward(loss_fn(model, x.to(dtype), y))
    with pytest.raises(ConfigurationError, match=r"4 of the optimizer's parameters are"):
        mp.step(opt)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before, strict=True))


def test_bf16_true_by_name_may_hold_bf16_weights():
    import dataclasses

    from ampkit.precision.engine import validate_param_dtypes
    from ampkit.precision.policy import resolve_precision

    pure = dataclasses.replace(resolve_precision("bf16", "cpu"), precision="bf16-true")
    bf16_model = make_model().to(torch.bfloat16)
    validate_param_dtypes(torch.optim.SGD(bf16_model.parameters(), lr=0.1), pure)  # no error
    fp16_model = make_model().half()
    with pytest.raises(ConfigurationError, match="are fp16"):
        validate_param_dtypes(torch.optim.SGD(fp16_model.parameters(), lr=0.1), pure)


def test_precision_warning_points_at_the_callers_line():
    with pytest.warns(PrecisionWarning) as caught:
        MixedPrecision("fp16", "cpu")  # resolve_precision runs two calls deeper, in ampkit
    assert caught[0].filename == __file__


def test_precision_change_is_accepted_only_on_purpose():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp16 = MixedPrecision("fp16", "cpu")
    state = fp16.state_dict()
    bf16 = MixedPrecision("bf16", "cpu")
    with pytest.raises(CheckpointError, match=r"CheckpointConfig\(allow_precision_change=True\)"):
        bf16.load_state_dict(state)
    assert bf16.load_state_dict(state, allow_precision_change=True) == "fp16"
    assert bf16.scaler.get_scale() == 1.0 and bf16.micro_step == 0
    assert bf16.load_state_dict(bf16.state_dict()) is None

"""LossScaler: closed-form scale arithmetic, skipping, bounds, hysteresis, misuse and state."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from ampkit import ConfigurationError, LossScaler, NonFiniteTrainingError, ScalerStateError


def make_model(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def scaled_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: LossScaler,
    inject: bool = False,
    step: int = 0,
) -> bool:
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    if inject:
        next(model.parameters()).grad[0, 0] = math.inf
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if isinstance(scaler, LossScaler):
        return not scaler.last_step_skipped
    return not inject  # GradScaler keeps no record of it


def run(scaler: LossScaler, pattern: str) -> list[float]:
    """Run one step per character of ``pattern`` ('x' injects an inf); return the scales."""
    model, optimizer = make_model()
    scales = []
    for i, ch in enumerate(pattern):
        stepped = scaled_step(model, optimizer, scaler, inject=ch == "x", step=i)
        assert stepped == (ch != "x")
        scales.append(scaler.get_scale())
    return scales


def test_scale_follows_closed_form():
    # growth every clean step; an unrealistically large growth factor magnifies mistakes
    init, growth, backoff = 2.0**10, 4.0, 0.25
    scaler = LossScaler(
        init_scale=init,
        growth_factor=growth,
        backoff_factor=backoff,
        growth_interval=1,
        min_scale=2.0**-30,
        max_scale=2.0**60,
    )
    pattern = "..x.xx...x"
    run(scaler, pattern)
    n, k = pattern.count("."), pattern.count("x")
    assert scaler.get_scale() == init * growth**n * backoff**k
    stats = scaler.stats
    assert (stats.steps, stats.skipped_steps, stats.consecutive_skips) == (
        10,
        k,
        1,
    )  # the pattern ends on an overflow


def test_matches_torch_gradscaler_when_unbounded_and_without_hysteresis():
    ours = LossScaler(init_scale=2.0**8, growth_interval=3, min_scale=2.0**-20, max_scale=2.0**40)
    theirs = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=3)
    pattern = "....x..x.x......xx....."
    model_a, opt_a = make_model()
    model_b, opt_b = make_model()
    for i, ch in enumerate(pattern):
        scaled_step(model_a, opt_a, ours, inject=ch == "x", step=i)
        scaled_step(model_b, opt_b, theirs, inject=ch == "x", step=i)  # same protocol
        assert ours.get_scale() == theirs.get_scale(), f"step {i}"
    for a, b in zip(model_a.parameters(), model_b.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_growth_waits_for_interval_and_resets_on_overflow():
    scaler = LossScaler(init_scale=8.0, growth_interval=3)
    assert run(scaler, "..x...") == [8.0, 8.0, 4.0, 4.0, 4.0, 8.0]


def test_hysteresis_backs_off_on_nth_overflow_only():
    scaler = LossScaler(init_scale=64.0, growth_interval=100, hysteresis=3)
    scales = run(scaler, "xx.x" + "xxx")
    assert scales == [64.0, 64.0, 64.0, 32.0, 32.0, 32.0, 16.0]
    assert scaler.stats.skipped_steps == 6


def test_hysteresis_counter_resets_when_scale_grows():
    scaler = LossScaler(init_scale=64.0, growth_interval=2, hysteresis=2)
    # overflow (1 of 2 tolerated), two clean steps grow the scale and reset the counter,
    # so the next single overflow is tolerated again
    assert run(scaler, "x..x") == [64.0, 64.0, 128.0, 128.0]


def test_scale_never_leaves_bounds():
    scaler = LossScaler(
        init_scale=4.0,
        growth_interval=1,
        min_scale=1.0,
        max_scale=16.0,
        max_skips_at_min_scale=None,
    )
    assert run(scaler, "xxxx......") == [2.0, 1.0, 1.0, 1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0]


def test_raises_after_consecutive_skips_at_min_scale():
    scaler = LossScaler(init_scale=2.0, min_scale=1.0, max_skips_at_min_scale=3)
    model, optimizer = make_model()
    # first overflow happens at scale 2 (not at the minimum), then three at the minimum
    for i in range(3):
        scaled_step(model, optimizer, scaler, inject=True, step=i)
    with pytest.raises(NonFiniteTrainingError) as info:
        scaled_step(model, optimizer, scaler, inject=True, step=3)
    message = str(info.value)
    assert "3 consecutive" in message and "learning rate" in message and "bf16" in message


def test_clean_step_resets_skips_at_min_scale():
    scaler = LossScaler(init_scale=1.0, min_scale=1.0, max_skips_at_min_scale=2)
    run(scaler, "x.x.x.")  # never two in a row at the minimum


def test_skipped_step_leaves_weights_bitwise_untouched():
    model, optimizer = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scaler = LossScaler()
    scaled_step(model, optimizer, scaler, step=0)  # creates Adam state
    before = copy.deepcopy(model.state_dict())
    opt_before = copy.deepcopy(optimizer.state_dict())
    assert not scaled_step(model, optimizer, scaler, inject=True, step=1)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    torch.testing.assert_close(optimizer.state_dict(), opt_before, rtol=0, atol=0)


def test_gradients_are_unscaled_exactly():
    model, optimizer = make_model()
    control, _ = make_model()
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    torch.nn.functional.mse_loss(control(x), y).backward()
    scaler = LossScaler(init_scale=2.0**12)
    scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
    scaler.unscale_(optimizer)
    for p, q in zip(model.parameters(), control.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=0)


def test_unscale_twice_raises_naming_call_order():
    model, optimizer = make_model()
    scaler = LossScaler()
    scaler.scale(model(torch.randn(2, 8)).sum()).backward()
    scaler.unscale_(optimizer)
    with pytest.raises(ScalerStateError, match=r"unscale_\(\) has already been called"):
        scaler.unscale_(optimizer)


def test_step_twice_raises():
    model, optimizer = make_model()
    scaler = LossScaler()
    scaler.scale(model(torch.randn(2, 8)).sum()).backward()
    scaler.step(optimizer)
    with pytest.raises(ScalerStateError, match=r"step\(\) has already been called"):
        scaler.step(optimizer)


def test_unscale_after_step_raises():
    model, optimizer = make_model()
    scaler = LossScaler()
    scaler.scale(model(torch.randn(2, 8)).sum()).backward()
    scaler.step(optimizer)
    with pytest.raises(ScalerStateError, match=r"after step\(\)"):
        scaler.unscale_(optimizer)


def test_update_without_step_raises():
    with pytest.raises(ScalerStateError, match=r"without a step\(\)"):
        LossScaler().update()


def test_closure_is_refused_while_scaling():
    model, _ = make_model()
    lbfgs = torch.optim.LBFGS(model.parameters())
    with pytest.raises(ConfigurationError, match="LBFGS"):
        LossScaler().step(lbfgs, closure=lambda: model(torch.randn(2, 8)).sum())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"growth_factor": 1.0}, "growth_factor"),
        ({"growth_factor": 0.5}, "growth_factor"),
        ({"backoff_factor": 1.0}, "backoff_factor"),
        ({"backoff_factor": 0.0}, "backoff_factor"),
        ({"hysteresis": 0}, "hysteresis"),
        ({"growth_interval": 0}, "growth_interval"),
        ({"min_scale": 0.0}, "min_scale"),
        ({"max_scale": 0.5}, "max_scale"),
        ({"init_scale": 2.0**30, "max_scale": 2.0**24}, "init_scale"),
        ({"init_scale": 0.5, "min_scale": 1.0}, "init_scale"),
        ({"init_scale": 1e39}, "init_scale"),
        ({"max_skips_at_min_scale": 0}, "max_skips_at_min_scale"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LossScaler(**kwargs)


def test_disabled_scaler_is_a_pass_through():
    model, optimizer = make_model()
    control, control_opt = make_model()
    scaler = LossScaler(enabled=False)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    assert scaler.scale(loss) is loss
    loss.backward()
    scaler.unscale_(optimizer)
    scaler.unscale_(optimizer)  # no-op when disabled, like GradScaler(enabled=False)
    assert scaler.step_all([optimizer])
    scaler.update()
    torch.nn.functional.mse_loss(control(x), y).backward()
    control_opt.step()
    for p, q in zip(model.parameters(), control.parameters(), strict=True):
        assert torch.equal(p, q)
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    assert scaler.stats.steps == 1


def test_state_dict_round_trip_mid_run_continues_identically():
    kwargs = dict(init_scale=2.0**10, growth_interval=2, hysteresis=2)
    pattern_a, pattern_b = "..xx.x.", "x...xx..x"
    straight = LossScaler(**kwargs)
    scales_straight = run(straight, pattern_a + pattern_b)
    first = LossScaler(**kwargs)
    run(first, pattern_a)
    resumed = LossScaler(**kwargs)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    assert run(resumed, pattern_b) == scales_straight[len(pattern_a) :]
    assert resumed.state_dict() == straight.state_dict()


def test_state_dict_survives_torch_save_weights_only(tmp_path):
    scaler = LossScaler(init_scale=256.0, growth_interval=1)
    run(scaler, ".x.")
    torch.save(scaler.state_dict(), tmp_path / "s.pt")
    loaded = torch.load(tmp_path / "s.pt", weights_only=True)
    other = LossScaler()
    other.load_state_dict(loaded)
    assert other.stats == scaler.stats


def test_loading_enabled_state_into_disabled_scaler_raises():
    enabled = LossScaler()
    with pytest.raises(ScalerStateError, match="disabled"):
        LossScaler(enabled=False).load_state_dict(enabled.state_dict())
    with pytest.raises(ScalerStateError, match="empty"):
        LossScaler().load_state_dict({})


def test_history_records_changes_and_is_bounded():
    scaler = LossScaler(init_scale=2.0**10, growth_interval=1, history_size=4, max_scale=2.0**30)
    run(scaler, "......")
    history = scaler.stats.scale_history
    assert len(history) == 4
    assert history[-1] == (6, 2.0**16)
    assert [s for s, _ in history] == [3, 4, 5, 6]


def test_reading_stats_does_not_touch_tensors(monkeypatch):
    scaler = LossScaler()
    run(scaler, "..x")
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("stats synced"))
    stats = scaler.stats
    assert stats.skipped_steps == 1 and stats.skip_rate == pytest.approx(1 / 3)

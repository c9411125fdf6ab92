"""LossScaler as a drop-in for ``torch.amp.GradScaler``: its constructor, its state, and
bitwise the same training on the patterns of PyTorch's AMP examples (fp16 autocast on the CPU,
overflow injected so that skipping, backoff and growth all happen)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from ampkit import ConfigurationError, LossScaler, ScalerStateError

# Wide bounds: GradScaler has none, and the runs below must not touch ours.
WIDE = {"min_scale": 2.0**-24, "max_scale": 2.0**40}
#: 'x': an inf is injected into a gradient at that iteration.
PATTERN = "..x...x.x.....xx...."


def _pair(init_scale: float = 2.0**10, growth_interval: int = 3) -> tuple[Any, Any]:
    ours = LossScaler("cpu", init_scale, 2.0, 0.5, growth_interval, True, **WIDE)
    theirs = torch.amp.GradScaler("cpu", init_scale, 2.0, 0.5, growth_interval, True)
    return ours, theirs


def _models(count: int) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [
        torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        for _ in range(count)
    ]


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
    return torch.nn.functional.mse_loss(out.float(), y)


def _inject(model: torch.nn.Module) -> None:
    next(model.parameters()).grad[0, 0] = math.inf


def typical_with_clipping(scaler: Any, inject: bool, step: int, parts: Any) -> None:
    (model,), (opt,) = parts
    x, y = _batch(step)
    scaler.scale(_loss(model, x, y)).backward()
    if inject:
        _inject(model)
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)


def multiple_models_losses_optimizers(scaler: Any, inject: bool, step: int, parts: Any) -> None:
    (m0, m1), (o0, o1) = parts
    x, y = _batch(step)
    with torch.autocast("cpu", dtype=torch.float16):
        out0, out1 = m0(x), m1(x)
        loss0 = torch.nn.functional.mse_loss(2 * out0 + 3 * out1, y)
        loss1 = torch.nn.functional.mse_loss(3 * out0 - 5 * out1, y)
    scaler.scale(loss0).backward(retain_graph=True)
    scaler.scale(loss1).backward()
    if inject:
        _inject(m1)
    scaler.unscale_(o0)  # the example unscales one optimizer to clip or inspect
    scaler.step(o0)
    scaler.step(o1)
    scaler.update()
    o0.zero_grad(set_to_none=True)
    o1.zero_grad(set_to_none=True)


def gradient_penalty(scaler: Any, inject: bool, step: int, parts: Any) -> None:
    (model,), (opt,) = parts
    x, y = _batch(step)
    loss = _loss(model, x, y)
    params = list(model.parameters())
    scaled = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    inv_scale = 1.0 / scaler.get_scale()
    grads = [g * inv_scale for g in scaled]
    with torch.autocast("cpu", dtype=torch.float16):
        norm = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
        loss = loss + norm
    scaler.scale(loss).backward()
    if inject:
        _inject(model)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)


def accumulation(scaler: Any, inject: bool, step: int, parts: Any) -> None:
    (model,), (opt,) = parts
    iters = 3
    for micro in range(iters):
        x, y = _batch(step * iters + micro)
        scaler.scale(_loss(model, x, y) / iters).backward()
    if inject:
        _inject(model)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)


EXAMPLES: dict[str, tuple[Callable[..., None], int]] = {
    "typical_with_clipping": (typical_with_clipping, 1),
    "multiple_models_losses_optimizers": (multiple_models_losses_optimizers, 2),
    "gradient_penalty": (gradient_penalty, 1),
    "accumulation": (accumulation, 1),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_bitwise_equal_to_gradscaler_on_the_amp_examples(name):
    example, count = EXAMPLES[name]
    runs = []
    for scaler in _pair():
        models = _models(count)
        optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
        scales = []
        for step, ch in enumerate(PATTERN):
            example(scaler, ch == "x", step, (models, optimizers))
            scales.append(scaler.get_scale())
        runs.append((scales, [p.detach().clone() for m in models for p in m.parameters()]))
    (ours_scales, ours), (their_scales, theirs) = runs
    assert ours_scales == their_scales
    assert len(set(ours_scales)) > 2  # grew and backed off, not a constant scale
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


def test_constructor_takes_gradscalers_positional_arguments():
    scaler = LossScaler("cpu", 2.0**8, 4.0, 0.25, 7, False)
    assert scaler.device == torch.device("cpu")
    assert (scaler.growth_factor, scaler.backoff_factor, scaler.growth_interval) == (4.0, 0.25, 7)
    assert not scaler.is_enabled()
    assert LossScaler().device is None
    with pytest.raises(ConfigurationError, match="device='gpu0' is not a device"):
        LossScaler("gpu0")


def test_a_gradscaler_state_migrates_a_run_midway():
    """Train with GradScaler, switch to LossScaler from its state: the run continues exactly."""
    models = _models(1)
    opt = torch.optim.AdamW(models[0].parameters(), lr=1e-2)
    gradscaler = torch.amp.GradScaler("cpu", 2.0**10, growth_interval=3)
    for step, ch in enumerate(PATTERN[:7]):
        typical_with_clipping(gradscaler, ch == "x", step, (models, [opt]))
    state = gradscaler.state_dict()
    control = torch.amp.GradScaler("cpu")
    control.load_state_dict(state)
    ours = LossScaler(**WIDE)
    note = ours.load_state_dict(state)
    assert note is not None and "start at zero" in note
    assert f"scale {gradscaler.get_scale():g}, growth tracker" in note
    assert ours.get_scale() == control.get_scale() and ours.stats.steps == 0
    assert ours.growth_interval == 3
    branches = []
    for scaler in (ours, control):
        copy_models = _models(1)
        copy_models[0].load_state_dict(models[0].state_dict())
        copy_opt = torch.optim.AdamW(copy_models[0].parameters(), lr=1e-2)
        copy_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # the state is shared
        for step, ch in enumerate(PATTERN[7:], start=7):
            typical_with_clipping(scaler, ch == "x", step, (copy_models, [copy_opt]))
        branches.append((scaler.get_scale(), list(copy_models[0].parameters())))
    assert branches[0][0] == branches[1][0]
    for a, b in zip(branches[0][1], branches[1][1], strict=True):
        assert torch.equal(a, b)


def test_a_gradscaler_state_outside_the_bounds_is_refused_whole():
    state = torch.amp.GradScaler("cpu", init_scale=0.5).state_dict()
    scaler = LossScaler()  # min_scale=1.0
    with pytest.raises(ScalerStateError, match=r"scale=0\.5 is invalid here.*min_scale="):
        scaler.load_state_dict(state)
    assert scaler.get_scale() == 2.0**16
    state = torch.amp.GradScaler("cpu").state_dict()
    state["_growth_tracker"] = 5000
    with pytest.raises(ScalerStateError, match="_growth_tracker=5000"):
        scaler.load_state_dict(state)

"""A new precision mode is one subclass plus one registration: a toy mode defined and registered
here (no other file edited) runs by name through MixedPrecision and the Trainer, and the
Trainer takes mode objects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

import ampkit
from ampkit import MixedPrecision, Trainer
from ampkit.precision.modes import PrecisionMode, TrainingSetup, register_mode, unregister_mode


class HalfStep(PrecisionMode):
    """bf16 autocast whose optimizer steps take half the gradient (a power of two, so the run
    is bitwise a bf16 run at half the learning rate), counting its hooks and keeping state."""

    precisions: ClassVar[tuple[str, ...]] = ("toy-halfstep",)

    def __init__(self, precision: str = "toy-halfstep") -> None:
        super().__init__(precision)
        self.calls: dict[str, int] = {"before": 0, "after": 0, "measure": 0}

    def setup_training(self, setup: TrainingSetup) -> list[str]:
        return [f"halfstep: {sum(1 for _ in setup.model.parameters())} tensors halved"]

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls["before"] += 1
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(0.5)

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, stepped: bool) -> None:
        self.calls["after"] += stepped

    def measure_next_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls["measure"] += 1

    def state_dict(self) -> dict[str, Any]:
        return {"after": self.calls["after"]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.calls["after"] = int(state["after"])


@pytest.fixture
def halfstep() -> Iterator[type[HalfStep]]:
    register_mode(HalfStep, compute_dtype=torch.bfloat16, aliases=("halfstep",))
    try:
        yield HalfStep
    finally:
        unregister_mode("toy-halfstep")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _data(n: int = 64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.randn(16, 4, generator=g))


def _fit(precision: Any, lr: float, **kwargs: Any) -> tuple[nn.Module, ampkit.FitResult]:
    model = _model()
    result = Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=lr),
        loss_fn=nn.functional.mse_loss,
        max_steps=6,
        precision=precision,
        device="cpu",
        batch_size=8,
        logging=ampkit.LoggingConfig(log_every=2),
        **kwargs,
    ).fit(_data())
    return model, result


def test_a_registered_mode_is_a_precision_by_name(halfstep):
    assert ampkit.parse_precision("HalfStep").precision == "toy-halfstep"
    mp = MixedPrecision("halfstep", "cpu")
    assert isinstance(mp.mode, halfstep) and mp.policy.compute_dtype == torch.bfloat16
    assert mp.policy.reason == "toy-halfstep was requested explicitly."
    with mp.autocast():
        assert nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp.backward(model(torch.randn(8, 16)).float().pow(2).mean())
    mp.step(opt)
    assert mp.mode.calls == {"before": 1, "after": 1, "measure": 0}
    state = mp.state_dict()
    assert state["mode"] == {"after": 1} and state["precision"] == "toy-halfstep"
    fresh = MixedPrecision("toy-halfstep", "cpu")
    fresh.load_state_dict(state)
    assert fresh.mode.calls["after"] == 1


def test_a_registered_mode_trains_in_the_trainer_as_its_closed_form_control(halfstep):
    toy, result = _fit("toy-halfstep", lr=0.1)
    control, _ = _fit("bf16", lr=0.05)
    for a, b in zip(toy.parameters(), control.parameters(), strict=True):
        assert torch.equal(a, b)
    assert result.precision == "toy-halfstep" and result.steps == 6
    assert "halfstep: 4 tensors halved" in result.notes


def test_the_trainer_calls_every_hook_of_a_mode_object(halfstep):
    mode = halfstep()
    _fit(mode, lr=0.1)
    assert mode.calls == {"before": 6, "after": 6, "measure": 3}  # logged: steps 2, 4, 6


def test_registration_is_refused_for_a_taken_name_and_undone_by_unregister(halfstep):
    class Clash(PrecisionMode):
        precisions: ClassVar[tuple[str, ...]] = ("bf16",)

    with pytest.raises(ampkit.ConfigurationError, match="'bf16' is taken"):
        register_mode(Clash, compute_dtype=torch.bfloat16)
    with pytest.raises(ampkit.ConfigurationError, match="the built-in precisions cannot"):
        unregister_mode("bf16")


def test_without_registration_the_name_is_unknown():
    with pytest.raises(ampkit.ConfigurationError, match="unknown precision 'toy-halfstep'"):
        MixedPrecision("toy-halfstep", "cpu")


def test_trainer_with_a_bf16_true_mode_object():
    model, result = _fit(ampkit.Bf16True(update_compensation="stochastic"), lr=0.05)
    assert model[0].weight.dtype == torch.bfloat16 and model[2].weight.dtype == torch.float32
    assert result.precision == "bf16-true" and result.update_compensation == "stochastic"
    assert result.lost_updates is not None


def test_trainer_with_a_mixed_mode_object_equals_the_name():
    by_mode, _ = _fit(ampkit.Mixed("bf16"), lr=0.1)
    by_name, _ = _fit("bf16-mixed", lr=0.1)
    for a, b in zip(by_mode.parameters(), by_name.parameters(), strict=True):
        assert torch.equal(a, b)

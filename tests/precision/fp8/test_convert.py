"""Converting the planned layers with torchao (emulated fp8 on the CPU) and training."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import ampkit
from ampkit import ConfigurationError, Fp8, MixedPrecision, Trainer, fp8_plan, resolve_precision
from ampkit.precision.fp8 import convert_to_fp8, fp8_layer_names

pytest.importorskip("torchao.float8")


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 64)
        self.out = nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _data(n: int = 256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 32, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.randn(32, 16, generator=g) / 32**0.5)


def _plan_all_but(model: nn.Module, skip: str, recipe: str = "tensorwise"):
    plan = fp8_plan(model, recipe=recipe, use_size_prior=False)
    layers = tuple(dataclasses.replace(d, fp8=d.name != skip) for d in plan.layers)
    return dataclasses.replace(plan, layers=layers)


def test_exactly_the_planned_layers_are_converted_and_keep_their_parameters():
    model = MLP()
    plan = _plan_all_but(model, "fc2")
    weight, keys = model.fc1.weight, set(model.state_dict())
    mp = MixedPrecision(Fp8(plan=plan, emulate=True), "cpu")
    mp.prepare_model(model)
    assert fp8_layer_names(model) == ["fc1", "out"]
    assert type(model.fc2) is nn.Linear
    assert model.fc1.weight is weight and set(model.state_dict()) == keys


def test_a_plan_for_another_model_is_refused():
    with pytest.raises(ConfigurationError, match="not nn.Linear modules of this model: fc9"):
        convert_to_fp8(MLP(), ["fc1", "fc9"], "tensorwise", emulate=True)


def test_plan_options_are_checked_against_the_precision():
    model = MLP()
    plan = _plan_all_but(model, "fc2", recipe="rowwise")
    emulated = resolve_precision("fp8", "cpu", emulate=True)
    with pytest.raises(ConfigurationError, match="made for the rowwise recipe"):
        Fp8(plan=plan, emulate=True)
    with (
        pytest.warns(DeprecationWarning, match=r"ampkit\.Fp8\(plan=\.\.\.\)"),
        pytest.raises(ConfigurationError, match="made for the rowwise recipe"),
    ):
        MixedPrecision(emulated, fp8_plan=plan)  # the old keyword, for one release
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ConfigurationError, match="plan: given, but the precision is bf16"),
    ):
        MixedPrecision("bf16", "cpu", fp8_plan=plan)


@pytest.mark.parametrize("spelling", ["fp8", "fp8-rowwise-gw-hp"])
def test_emulated_fp8_training_decreases_the_loss(spelling):
    torch.manual_seed(0)
    model = MLP()
    policy = resolve_precision(spelling, "cpu", emulate=True)
    plan = _plan_all_but(model, "", recipe=policy.fp8_recipe)
    trainer = Trainer(
        model,
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        loss_fn=nn.functional.mse_loss,
        max_steps=30,
        precision=ampkit.Fp8(policy.fp8_recipe, plan=plan, emulate=True),
        batch_size=32,
        logging=ampkit.LoggingConfig(log_every=5),
    )
    losses = []

    class Record(ampkit.Callback):
        def on_log(self, trainer, metrics):
            losses.append(metrics.loss)

    trainer.callbacks.append(Record())
    result = trainer.fit(_data())
    assert fp8_layer_names(model) == ["fc1", "fc2", "out"]
    assert losses[-1] < 0.5 * losses[0]
    assert any("3 of 3 Linear layers converted" in n for n in result.notes)


def test_trainer_plans_from_the_first_batch_when_no_plan_is_given():
    trainer = Trainer(
        MLP(),
        lambda p: torch.optim.SGD(p, lr=1e-3),
        loss_fn=nn.functional.mse_loss,
        max_steps=1,
        precision=resolve_precision("fp8", "cpu", emulate=True),
        batch_size=8,
    )
    result = trainer.fit(_data(16))
    plan = trainer.mp.mode.plan
    assert [d.tokens for d in plan.layers] == [8, 8, 8]  # measured at the real batch
    assert plan.selected == () and "0 of 3" in result.notes[0]  # small layers: prior says no


def test_trainer_leaves_keep_fp32_islands_out_of_the_plan():
    model = MLP()
    trainer = Trainer(
        model,
        lambda p: torch.optim.SGD(p, lr=1e-3),
        loss_fn=nn.functional.mse_loss,
        max_steps=1,
        precision=ampkit.Fp8(plan=_plan_all_but(model, ""), emulate=True),
        batch_size=8,
        keep_fp32=["fc1"],
    )
    trainer.fit(_data(16))
    assert fp8_layer_names(model) == ["fc2", "out"]
    assert {d.name: d.reason for d in trainer.mp.mode.plan.layers}[
        "fc1"
    ] == "kept in fp32 (keep_fp32)"


class FalconLike(nn.Linear):
    """FalconLinear's forward: ``input @ weight.T + bias``, the same function as Linear's."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = input @ self.weight.T
        return out if self.bias is None else out + self.bias


class Doubled(nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(input)


class SubclassMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = FalconLike(32, 64)
        self.fc2 = Doubled(64, 64)
        self.out = nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def test_a_falcon_like_subclass_is_converted_and_an_overriding_one_kept():
    model = SubclassMLP()
    x = torch.randn(8, 32)
    plan = fp8_plan(model, (x, torch.randn(8, 16)), loss_fn=nn.functional.mse_loss,
                    use_size_prior=False)  # fmt: skip
    assert plan.selected == ("fc1", "out")
    (kept,) = [d for d in plan.layers if not d.fp8]
    assert kept.name == "fc2" and "Doubled overrides forward" in kept.reason
    weight = model.fc1.weight
    assert convert_to_fp8(model, plan.selected, "tensorwise", emulate=True) == ["fc1", "out"]
    assert type(model.fc1).__name__ == "Float8Linear" and model.fc1.weight is weight
    assert type(model.fc2) is Doubled  # its doubling survives
    with pytest.raises(ConfigurationError, match="fp8 cannot replace.*fc2: Doubled overrides"):
        convert_to_fp8(SubclassMLP(), ["fc2"], "tensorwise", emulate=True)

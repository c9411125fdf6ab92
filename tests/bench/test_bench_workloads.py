"""``--model`` resolution: built-ins, user factories and bad specs."""

from __future__ import annotations

import pytest
import torch

from ampkit.bench.workloads import Workload, convnet_workload, gpt_workload, load_workload
from ampkit.errors import ConfigurationError
from ampkit.models.built import BuiltModel
from ampkit.models.resolve import build_model


def test_gpt_batches_are_deterministic_tokens():
    w = gpt_workload(batch_size=2, seq_len=16, n_layer=1, n_embd=32, n_head=2)
    x, y = w.batch(3)
    assert x.shape == (2, 16) and w.items_per_step == 32 and w.unit == "tokens"
    assert torch.equal(x, w.batch(3)[0]) and not torch.equal(x, w.batch(4)[0])
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert w.flops_per_step and w.flops_per_step > 0


def test_convnet_batches_are_images():
    w = convnet_workload(batch_size=4, image_size=16)
    x, y = w.batch(0)
    assert x.shape == (4, 3, 16, 16) and y.shape == (4,) and w.unit == "samples"
    assert w.loss(w.model, x, y).ndim == 0


def test_factory_tuple_with_batch_size(user_models):
    w = load_workload(f"{user_models}:tiny", batch_size=5)
    x, y = w.batch(0)
    assert x.shape == (5, 16) and w.items_per_step == 5
    assert torch.isfinite(w.loss(w.model, x, y))


def test_factory_with_float_targets_uses_mse(user_models):
    w = load_workload(f"{user_models}:regression", batch_size=3)  # takes no batch_size: ignored
    x, y = w.batch(0)
    expected = torch.nn.functional.mse_loss(w.model(x), y)
    torch.testing.assert_close(w.loss(w.model, x, y), expected)


def test_factory_returning_a_built_model_is_used_as_is(user_models, monkeypatch):
    import bench_models

    made = BuiltModel(
        name="mine",
        model=torch.nn.Linear(2, 2),
        batch=lambda s: (torch.ones(1, 2), torch.zeros(1, dtype=torch.long)),
        loss_fn=lambda out, y: out.sum(),
        items_per_step=1,
        batch_size=1,
        make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
    )
    monkeypatch.setattr(bench_models, "mine", lambda: made, raising=False)
    workload = load_workload("bench_models:mine")
    assert workload.built is made and workload.make_optimizer is made.make_optimizer
    x, y = workload.batch(0)
    assert torch.equal(workload.loss(made.model, x, y), made.model(x).sum())


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("resnet", "is not a model. Use gpt, convnet, hf:<name>"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("bench_models:missing", "has no function 'missing'"),
        ("bench_models:NOT_CALLABLE", "is not callable"),
        ("bench_models:wrong_type", "returned int"),
        ("bench_models:wrong_tuple", "returned a tuple of 1 items"),
    ],
)
def test_bad_specs_raise_configuration_errors(user_models, spec, needle):
    with pytest.raises(ConfigurationError, match="^model: ") as info:
        load_workload(spec)
    assert needle in str(info.value) and info.value.argument == "model"


def test_built_model_fields_are_validated_and_named():
    with pytest.raises(ConfigurationError) as info:
        BuiltModel(
            name="",
            model=torch.nn.Linear(2, 2),
            batch=lambda s: (torch.ones(1, 2), None),
            items_per_step=0,
            batch_size=True,
        )
    message = str(info.value)
    assert "name must be a non-empty string" in message
    assert "items_per_step must be an integer >= 1" in message
    assert "batch_size must be an integer >= 1" in message
    assert "Required fields: name, model, batch, items_per_step, batch_size" in message


def test_dict_batches_are_inputs_without_targets(user_models, monkeypatch):
    import bench_models

    class LossNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 1)

        def forward(self, features, labels):
            return {"loss": (self.fc(features).squeeze(-1) - labels).pow(2).mean()}

    batch = {"features": torch.ones(4, 3), "labels": torch.zeros(4)}
    monkeypatch.setattr(bench_models, "loss_net", lambda: (LossNet(), batch), raising=False)
    w = load_workload("bench_models:loss_net")
    inputs, targets = w.batch(0)
    assert targets is None and inputs is batch
    expected = w.model(**batch)["loss"]
    assert torch.equal(w.loss(w.model, inputs, targets), expected)


def test_the_gpt_workload_is_the_gpt_of_build_model():
    w = load_workload("gpt", batch_size=2)
    built = build_model("gpt", batch_size=2)
    x, y = w.batch(1)
    assert torch.equal(x, built.batch(1)[0]) and torch.equal(y, built.batch(1)[1])
    assert torch.equal(w.loss(w.model, x, y), built.loss(built.model, (x, y)))
    assert w.flops_per_step == built.flops_per_step and w.description == built.description
    assert load_workload(w) is w and isinstance(load_workload(built), Workload)


def test_dict_inputs_and_logits_outputs_train_through_the_workload(user_models, monkeypatch):
    import bench_models

    class DictNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)

        def forward(self, features):
            return {"logits": self.fc(features)}

    inputs, targets = {"features": torch.ones(4, 3)}, torch.zeros(4, dtype=torch.long)
    monkeypatch.setattr(
        bench_models, "dict_net", lambda: (DictNet(), inputs, targets), raising=False
    )
    w = load_workload("bench_models:dict_net")
    x, y = w.batch(0)
    expected = torch.nn.functional.cross_entropy(w.model(**x)["logits"], y)
    assert torch.equal(w.loss(w.model, x, y), expected) and w.items_per_step == 4

"""``--model`` resolution: built-ins, user factories and bad specs."""

from __future__ import annotations

import pytest
import torch

from ampkit.bench.workloads import Workload, convnet_workload, gpt_workload, load_workload
from ampkit.errors import ConfigurationError


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


def test_factory_returning_a_workload_is_used_as_is(user_models, monkeypatch):
    import bench_models

    made = Workload(
        name="mine",
        model=torch.nn.Linear(2, 2),
        batch=lambda s: (torch.ones(1, 2), torch.zeros(1, dtype=torch.long)),
        loss=lambda m, x, y: m(x).sum(),
        items_per_step=1,
    )
    monkeypatch.setattr(bench_models, "mine", lambda: made, raising=False)
    assert load_workload("bench_models:mine") is made


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
    with pytest.raises(ConfigurationError, match="--model") as info:
        load_workload(spec)
    assert needle in str(info.value)


def test_workload_fields_are_validated_and_named():
    with pytest.raises(ConfigurationError) as info:
        Workload(
            name="",
            model=torch.nn.Linear(2, 2),
            batch=lambda s: (torch.ones(1, 2), None),
            loss=lambda m, x, y: m(x).sum(),
            items_per_step=0,
        )
    message = str(info.value)
    assert "name must be a non-empty string" in message
    assert "items_per_step must be an integer >= 1" in message
    assert "Required fields: name, model, batch, loss, items_per_step" in message


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

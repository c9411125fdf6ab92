"""The registry of built-in models and the one ``gpt`` every command builds."""

from __future__ import annotations

import pytest
import torch

from ampkit.models.built import BuiltModel
from ampkit.models.builtin import BUILTINS, GPT_DEFAULTS, builtin, convnet_model, gpt_model
from ampkit.models.gpt import GPTConfig, train_flops
from ampkit.models.resolve import BUILTIN_MODELS, build_model


def test_the_registry_is_what_the_resolver_knows():
    assert BUILTIN_MODELS == tuple(BUILTINS) == ("gpt", "convnet")
    assert BUILTINS["gpt"] is gpt_model and BUILTINS["convnet"] is convnet_model


def test_a_new_builtin_is_one_registered_builder():
    def probe(batch_size: int | None = None, *, seed: int = 0) -> BuiltModel:
        model = torch.nn.Linear(2, 1)
        return BuiltModel(
            name="_probe",
            model=model,
            batch=lambda step: torch.full((batch_size or 3, 2), float(seed + step)),
            items_per_step=batch_size or 3,
            batch_size=batch_size or 3,
        )

    try:
        builtin("_probe")(probe)
        built = build_model("_probe", batch_size=4, seed=2)
    finally:
        BUILTINS.pop("_probe", None)
    assert built.batch_size == 4 and float(built.batch(1)[0, 0]) == 3.0
    with pytest.raises(ValueError, match="duplicate built-in model 'gpt'"):
        builtin("gpt")(probe)


def test_gpt_defaults_are_gptconfig_and_ampkit_train_defaults():
    from ampkit.job.config import TrainConfig

    config, train = GPTConfig(), TrainConfig()
    assert GPT_DEFAULTS["seq_len"] == config.block_size == train.seq_len
    assert GPT_DEFAULTS["batch_size"] == train.batch_size
    for key in ("n_layer", "n_head", "n_embd"):
        assert GPT_DEFAULTS[key] == getattr(config, key) == getattr(train, key)
    built = build_model("gpt")
    assert built.config == config and built.batch_size == 16
    assert built.example_batch[0].shape == (16, 128) and built.unit == "tokens"


def test_gpt_carries_what_bench_needs():
    built = build_model("gpt", batch_size=2)
    assert built.flops_per_step == train_flops(built.model, 2, 128)
    optimizer = built.make_optimizer(built.model)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.defaults["weight_decay"] == 0.1 and optimizer.defaults["lr"] == 1e-3


def test_weights_are_seeded_without_touching_the_callers_rng():
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("gpt", batch_size=1, seed=5)
    assert torch.equal(torch.rand(1), expected)
    b = build_model("gpt", batch_size=1, seed=5)
    c = build_model("gpt", batch_size=1, seed=6)
    pairs = list(zip(a.model.parameters(), b.model.parameters(), strict=True))
    assert all(torch.equal(x, y) for x, y in pairs)
    assert not torch.equal(a.model.tok_emb.weight, c.model.tok_emb.weight)


def test_example_inputs_drop_targets_and_labels():
    net = build_model("convnet", batch_size=2)
    assert torch.equal(net.example_inputs, net.example_batch[0])
    dict_model = BuiltModel(
        name="d",
        model=torch.nn.Linear(1, 1),
        batch=lambda step: {"input_ids": torch.ones(2, 3), "labels": torch.zeros(2, 3)},
        items_per_step=2,
        batch_size=2,
    )
    assert list(dict_model.example_inputs) == ["input_ids"]
    assert dict_model.parameter_count == 2

"""TrainConfig and GPTConfig refuse what would crash later (types, ranges, n_head=0)."""

from __future__ import annotations

import pytest

from ampkit import ConfigurationError, TrainConfig
from ampkit.models.gpt import GPTConfig


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"steps": True}, "--steps must be an integer >= 1, got True"),
        ({"steps": "3"}, "--steps must be an integer >= 1, got '3'"),
        ({"n_head": 0}, "--n-head must be an integer >= 1, got 0"),
        ({"n_layer": 0}, "--n-layer must be an integer >= 1"),
        ({"seed": 2**70}, "--seed must be an integer from -4294967295 to 4294967295"),
        ({"checkpoint_every": 0, "out": "x"}, "--checkpoint-every must be an integer >= 1"),
        ({"keep_last": -1, "out": "x"}, "--keep-last must be an integer >= 1"),
        ({"lr": float("nan")}, "--lr must be a positive number"),
        ({"max_grad_norm": True}, "--max-grad-norm must be a positive number"),
        ({"compile": "yes"}, "--compile must be True, False or None"),
        ({"overwrite": True, "resume": "auto", "out": "x"}, "--overwrite (replace"),
    ],
)
def test_invalid_settings_name_the_flag(kwargs, needle):
    with pytest.raises(ConfigurationError) as caught:
        TrainConfig(**kwargs).validate()
    assert needle in str(caught.value)


def test_negative_and_large_seeds_within_range_are_fine():
    TrainConfig(seed=-5).validate()
    TrainConfig(seed=2**32 - 1).validate()


@pytest.mark.parametrize("kwargs", [{"n_head": 0}, {"n_layer": True}, {"dropout": 1.0}])
def test_gpt_config_refuses_shapes_that_would_divide_by_zero(kwargs):
    with pytest.raises(ConfigurationError, match="GPTConfig"):
        GPTConfig(**kwargs)

"""LossScaler and MixedPrecision refuse arguments and loaded state they cannot train with."""

from __future__ import annotations

import math

import pytest

from ampkit import CheckpointError, ConfigurationError, LossScaler, MixedPrecision, ScalerStateError


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("scale", math.nan),
        ("scale", 0.0),
        ("scale", -1.0),
        ("scale", math.inf),
        ("growth_factor", 0.5),
        ("growth_factor", 1.0),
        ("backoff_factor", 2.0),
        ("growth_interval", True),
        ("hysteresis_left", 0),
        ("skipped_steps", 99),
        ("scale_history", [[0, math.nan]]),
    ],
)
def test_load_state_dict_refuses_what_init_would_and_changes_nothing(key, value):
    scaler = LossScaler(init_scale=1024.0)
    state = LossScaler().state_dict()
    state[key] = value
    with pytest.raises(ScalerStateError, match=f"load_state_dict: {key}="):
        scaler.load_state_dict(state)
    assert scaler.get_scale() == 1024.0


def test_load_state_dict_names_missing_keys_and_refuses_a_non_dict():
    state = LossScaler().state_dict()
    del state["scale"]
    with pytest.raises(ScalerStateError, match="lacks scale"):
        LossScaler().load_state_dict(state)
    with pytest.raises(ScalerStateError, match="got a list"):
        LossScaler().load_state_dict([1, 2])  # type: ignore[arg-type]


def test_a_valid_state_round_trips():
    source = LossScaler(init_scale=512.0, hysteresis=2)
    target = LossScaler()
    target.load_state_dict(source.state_dict())
    assert target.state_dict() == source.state_dict()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"enabled": "no"},
        {"growth_interval": True},
        {"hysteresis": True},
        {"max_skips_at_min_scale": True},
        {"history_size": 0},
        {"history_size": "many"},
        {"growth_factor": math.inf},
        {"init_scale": math.nan},
    ],
)
def test_scaler_arguments_are_typed(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ConfigurationError, match=f"LossScaler: {name}="):
        LossScaler(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"grad_accum_steps": True}, "grad_accum_steps: True"),
        ({"max_grad_norm": True}, "max_grad_norm: True"),
        ({"max_grad_norm": math.inf}, "max_grad_norm: inf"),
        ({"tf32": "yes"}, "tf32: 'yes'"),
    ],
)
def test_mixed_precision_arguments_are_typed(kwargs, needle):
    with pytest.raises(ConfigurationError, match=needle):
        MixedPrecision("fp32", "cpu", **kwargs)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda s: s.pop("scaler"), "expected a dict with the keys"),
        (lambda s: s.update(micro_step=5), "micro_step=5 is invalid"),
        (lambda s: s.update(micro_step=-1), "micro_step=-1 is invalid"),
        (lambda s: s.update(micro_step=True), "micro_step=True is invalid"),
    ],
)
def test_mixed_precision_refuses_malformed_state(change, needle):
    mp = MixedPrecision("fp32", "cpu", grad_accum_steps=2)
    state = mp.state_dict()
    change(state)
    with pytest.raises(CheckpointError, match=needle):
        mp.load_state_dict(state)
    with pytest.raises(CheckpointError, match="expected a dict"):
        mp.load_state_dict(None)  # type: ignore[arg-type]

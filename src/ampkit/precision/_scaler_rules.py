"""What a :class:`~ampkit.LossScaler` accepts: its settings, and the state it loads.

One table of rules, used twice: by the constructor on its arguments (raising
``ConfigurationError``) and by ``load_state_dict`` on a checkpoint's values (raising
``ScalerStateError``), so that a state the constructor would refuse (a NaN scale, which makes
fp16 skip every step forever) cannot be loaded either. The checks return the first problem
as ``(name, value, allowed)`` and raise nothing themselves.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from ampkit._validate import is_int, is_number

__all__ = [
    "DEFAULT_MAX_SCALE",
    "DEFAULT_MIN_SCALE",
    "FP32_MAX",
    "STATE_KEYS",
    "default_bounds",
    "settings_problem",
    "state_problem",
    "to_fp32",
]

Problem = tuple[str, object, str]

#: The bounds a scaler gets when its constructor is given none: they widen to take in an
#: ``init_scale`` outside them (``torch.amp.GradScaler`` has no bounds, and accepts any scale).
DEFAULT_MIN_SCALE = 1.0
DEFAULT_MAX_SCALE = 2.0**24
#: The largest finite fp32 number: the scale multiplies the loss as an fp32 tensor, as
#: GradScaler's does, so it must stay finite in fp32.
FP32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def to_fp32(value: float) -> float:
    """``value`` rounded to the nearest fp32 number (GradScaler keeps its scale in fp32)."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def default_bounds(
    init_scale: object, min_scale: float | None, max_scale: float | None
) -> tuple[object, object]:
    """The bounds a scaler uses: the given ones, or the defaults widened to hold
    ``init_scale`` (a bound given explicitly never moves)."""
    low: object = min_scale
    high: object = max_scale
    start = float(init_scale) if is_number(init_scale) and init_scale > 0 else None
    if low is None:
        low = DEFAULT_MIN_SCALE if start is None else min(DEFAULT_MIN_SCALE, start)
    if high is None:
        high = DEFAULT_MAX_SCALE if start is None else min(max(DEFAULT_MAX_SCALE, start), FP32_MAX)
    return low, high


#: The keys of ``LossScaler.state_dict()`` (enabled scaler).
STATE_KEYS = (
    "scale",
    "growth_tracker",
    "hysteresis_left",
    "steps",
    "skipped_steps",
    "consecutive_skips",
    "skips_at_min_scale",
    "scale_history",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "min_scale",
    "max_scale",
    "hysteresis",
)


def settings_problem(
    *,
    growth_factor: object,
    backoff_factor: object,
    growth_interval: object,
    hysteresis: object,
    min_scale: object,
    max_scale: object,
    scale: object,
    scale_name: str = "init_scale",
    max_skips_at_min_scale: object = None,
    history_size: object = 1,
    enabled: object = True,
) -> Problem | None:
    """The first setting out of range, as ``(name, value, allowed)``, or None."""
    low = min_scale if is_number(min_scale) and min_scale > 0 else None
    high = max_scale if low is not None and is_number(max_scale) and max_scale >= low else None
    rules: list[tuple[str, object, bool, str]] = [
        ("enabled", enabled, isinstance(enabled, bool), "True or False"),
        (
            "growth_factor",
            growth_factor,
            is_number(growth_factor) and growth_factor > 1,
            "a finite number > 1 (e.g. 2.0)",
        ),
        (
            "backoff_factor",
            backoff_factor,
            is_number(backoff_factor) and 0 < backoff_factor < 1,
            "in (0, 1), e.g. 0.5",
        ),
        ("growth_interval", growth_interval, is_int(growth_interval, 1), "an integer >= 1"),
        (
            "hysteresis",
            hysteresis,
            is_int(hysteresis, 1),
            "an integer >= 1 (1 backs off on every overflow)",
        ),
        ("min_scale", min_scale, low is not None, "a finite number > 0"),
        (
            "max_scale",
            max_scale,
            high is not None and high <= FP32_MAX,
            f"finite in fp32 (<= {FP32_MAX:g}) and >= min_scale ({min_scale})",
        ),
        (
            scale_name,
            scale,
            is_number(scale) and low is not None and high is not None and low <= scale <= high,
            f"within [min_scale, max_scale] = [{min_scale}, {max_scale}] (pass min_scale= or "
            "max_scale= to widen them)",
        ),
        (
            "max_skips_at_min_scale",
            max_skips_at_min_scale,
            max_skips_at_min_scale is None or is_int(max_skips_at_min_scale, 1),
            "None or an integer >= 1",
        ),
        ("history_size", history_size, is_int(history_size, 1), "an integer >= 1"),
    ]
    for name, value, ok, allowed in rules:
        if not ok:
            return name, value, allowed
    return None


def state_problem(state: Mapping[str, Any]) -> Problem | None:
    """The first key of an enabled scaler's state that is missing or out of range, or None.

    Settings follow :func:`settings_problem` (the scale takes ``init_scale``'s rule); the
    counters must be integers that fit together (``skipped_steps <= steps``, a growth tracker
    below ``growth_interval``, ...) and the history ``[step, scale]`` pairs.
    """
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        return missing[0], None, "present"
    found = settings_problem(
        growth_factor=state["growth_factor"],
        backoff_factor=state["backoff_factor"],
        growth_interval=state["growth_interval"],
        hysteresis=state["hysteresis"],
        min_scale=state["min_scale"],
        max_scale=state["max_scale"],
        scale=state["scale"],
        scale_name="scale",
    )
    if found:
        return found
    steps = state["steps"]
    rules: list[tuple[str, bool, str]] = [
        ("steps", is_int(steps, 0), "an integer >= 0"),
        (
            "skipped_steps",
            is_int(steps, 0) and is_int(state["skipped_steps"], 0, steps),
            f"an integer in [0, steps={steps}]",
        ),
        (
            "consecutive_skips",
            is_int(state["skipped_steps"], 0)
            and is_int(state["consecutive_skips"], 0, state["skipped_steps"]),
            "an integer in [0, skipped_steps]",
        ),
        (
            "skips_at_min_scale",
            is_int(state["consecutive_skips"], 0)
            and is_int(state["skips_at_min_scale"], 0, state["consecutive_skips"]),
            "an integer in [0, consecutive_skips]",
        ),
        (
            "growth_tracker",
            is_int(state["growth_tracker"], 0, state["growth_interval"] - 1),
            f"an integer in [0, growth_interval) = [0, {state['growth_interval']})",
        ),
        (
            "hysteresis_left",
            is_int(state["hysteresis_left"], 1, state["hysteresis"]),
            f"an integer in [1, hysteresis={state['hysteresis']}]",
        ),
        (
            "scale_history",
            isinstance(state["scale_history"], (list, tuple))
            and all(
                isinstance(item, (list, tuple))
                and len(item) == 2
                and is_int(item[0], 0)
                and is_number(item[1])
                and item[1] > 0
                for item in state["scale_history"]
            ),
            "a list of [step, scale] pairs (step an integer >= 0, scale a finite number > 0)",
        ),
    ]
    for name, ok, allowed in rules:
        if not ok:
            return name, state[name], allowed
    return None

"""The shared argument checks: booleans are not integers, NaN and inf are not numbers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampkit._validate import check_int, check_number, is_int, is_number
from ampkit.errors import CheckpointError, ConfigurationError


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_is_int_refuses_what_is_not_an_int(value):
    assert not is_int(value)


@given(st.integers(), st.integers(-5, 5), st.integers(-5, 5))
def test_is_int_is_a_range_check_on_ints(value, low, span):
    high = low + abs(span)
    assert is_int(value, low, high) == (low <= value <= high)


@pytest.mark.parametrize("value", [True, math.nan, math.inf, -math.inf, "1.0", None])
def test_is_number_refuses_bools_and_non_finite_values(value):
    assert not is_number(value)


def test_is_number_bounds_and_open_low():
    assert is_number(0, 0) and not is_number(0, 0, open_low=True)
    assert is_number(0.5, 0, 1, open_low=True) and not is_number(1.5, 0, 1)


def test_check_int_message_names_where_what_and_the_rule():
    with pytest.raises(ConfigurationError) as info:
        check_int("max_steps", True, where="Trainer")
    assert str(info.value) == "Trainer: max_steps=True is invalid. It must be an integer >= 1."
    with pytest.raises(
        ConfigurationError,
        match=r"^steps: 0 is invalid\. It must be an integer "
        r"in \[1, 9\]\. Use 1 to 9\.$",
    ):
        check_int("steps", 0, high=9, hint="Use 1 to 9.")
    check_int("steps", None, allow_none=True)
    check_int("steps", 3)


def test_check_number_and_the_error_type():
    with pytest.raises(CheckpointError, match=r"a finite number > 0$|a finite number > 0\.$"):
        check_number("scale", math.nan, low=0, open_low=True, error=CheckpointError)
    with pytest.raises(ConfigurationError, match="or None"):
        check_number("lr", "x", allow_none=True)
    check_number("lr", 1e-3, low=0, open_low=True)

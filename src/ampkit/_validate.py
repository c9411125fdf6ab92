"""The argument checks every layer shares: integers that are not booleans, finite numbers.

Python's ``bool`` is an ``int`` (``isinstance(True, int)`` holds), so ``steps=True`` would pass
a plain ``isinstance(steps, int)`` check as 1; and ``float("nan") >= 1`` is False while
``float("inf") > 0`` is True. These predicates say what ampkit means by "an integer" and "a
number", once, and :func:`check_int` / :func:`check_number` raise the one message shape the
library uses for them (what was given, what is allowed). Importing this module imports no torch.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from ampkit.errors import AmpkitError, ConfigurationError

__all__ = ["check_int", "check_number", "is_int", "is_number"]


def is_int(value: object, low: float = -math.inf, high: float = math.inf) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` (not a ``bool``) with ``low <= value <= high``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def is_number(
    value: object,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    open_low: bool = False,
) -> TypeGuard[float]:
    """Whether ``value`` is a finite ``int`` or ``float`` (not a ``bool``) in ``[low, high]``
    (``(low, high]`` with ``open_low``)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return False
    return (low < value if open_low else low <= value) and value <= high


def _bounds(low: float, high: float, *, open_low: bool = False) -> str:
    lower = "> " if open_low else ">= "
    if high == math.inf:
        return f"{lower}{low:g}" if low != -math.inf else ""
    if low == -math.inf:
        return f"<= {high:g}"
    return f"in {'(' if open_low else '['}{low:g}, {high:g}]"


def _raise(
    error: type[AmpkitError], where: str | None, name: str, value: Any, allowed: str, hint: str
) -> None:
    subject = f"{where}: {name}={value!r}" if where else f"{name}: {value!r}"
    raise error(f"{subject} is invalid. It must be {allowed}.{' ' + hint if hint else ''}")


def check_int(
    name: str,
    value: object,
    *,
    low: int = 1,
    high: float = math.inf,
    allow_none: bool = False,
    where: str | None = None,
    hint: str = "",
    error: type[AmpkitError] = ConfigurationError,
) -> None:
    """Refuse ``value`` unless it is an integer in ``[low, high]`` (or None with
    ``allow_none``).

    Args:
        name: the argument's name, as the caller's signature spells it.
        where: what is being configured (``"Trainer"``, ``"GPTConfig"``), named first.
        hint: a sentence on how to fix it, appended to the message.
        error: the exception type (``CheckpointError`` for values read from a checkpoint).

    Raises:
        ConfigurationError: (or ``error``) ``value`` is not such an integer; the message reads
            ``where: name=value is invalid. It must be an integer >= low.``
    """
    if (value is None and allow_none) or is_int(value, low, high):
        return
    allowed = f"an integer {_bounds(low, high)}".rstrip()
    _raise(error, where, name, value, allowed + (" or None" if allow_none else ""), hint)


def check_number(
    name: str,
    value: object,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    open_low: bool = False,
    allow_none: bool = False,
    where: str | None = None,
    hint: str = "",
    error: type[AmpkitError] = ConfigurationError,
) -> None:
    """Refuse ``value`` unless it is a finite number in the bounds (or None with
    ``allow_none``); arguments as :func:`check_int`.

    Raises:
        ConfigurationError: (or ``error``) ``value`` is not such a number.
    """
    if (value is None and allow_none) or is_number(value, low, high, open_low=open_low):
        return
    allowed = f"a finite number {_bounds(low, high, open_low=open_low)}".rstrip()
    _raise(error, where, name, value, allowed + (" or None" if allow_none else ""), hint)

"""Precision modes: one class per mode, registered here and nowhere else.

* :class:`~ampkit.precision.modes.base.PrecisionMode` (``base``): the hooks every mode has;
* :class:`Fp32` (``fp32``), :class:`Mixed` (``mixed``: fp16 with loss scaling, bf16),
  :class:`Bf16True` (``bf16_true``), :class:`Fp8` (``fp8``).

:data:`MODES` maps each canonical precision name to its class; :func:`precision_mode` builds
the mode for a resolved :class:`~ampkit.Policy` (or a spelling, unbound), with the
:class:`~ampkit.MixedPrecision` options of that mode. A new mode is a subclass in a new file
plus one :func:`register_mode` call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ampkit.errors import ConfigurationError
from ampkit.precision.modes.base import DoctorSection, PrecisionMode, TrainingSetup
from ampkit.precision.modes.bf16_true import Bf16True
from ampkit.precision.modes.fp8 import Fp8
from ampkit.precision.modes.fp32 import Fp32
from ampkit.precision.modes.mixed import Mixed
from ampkit.precision.policy import (
    Policy,
    parse_precision,
    register_precision,
    unregister_precision,
)

__all__ = [
    "MODES",
    "Bf16True",
    "DoctorSection",
    "Fp8",
    "Fp32",
    "Mixed",
    "PrecisionMode",
    "TrainingSetup",
    "precision_mode",
    "register_mode",
    "unregister_mode",
]

#: Canonical precision name -> the mode class that trains in it.
MODES: dict[str, type[PrecisionMode]] = {
    "fp32": Fp32,
    "fp16": Mixed,
    "bf16": Mixed,
    "bf16-true": Bf16True,
    "fp8": Fp8,
}


def register_mode(
    mode: type[PrecisionMode],
    *,
    compute_dtype: torch.dtype,
    param_dtype: torch.dtype = torch.float32,
    uses_scaler: bool = False,
    aliases: tuple[str, ...] = (),
) -> type[PrecisionMode]:
    """Register a new mode class for its precision name (``mode.precisions``, one name):
    the name becomes a precision every command and ``resolve_precision`` accept
    (:func:`~ampkit.precision.policy.register_precision`). Returns ``mode``.

    Args:
        mode: the :class:`PrecisionMode` subclass.
        compute_dtype, param_dtype, uses_scaler, aliases: the facts of its policy, as
            :func:`~ampkit.precision.policy.register_precision`.

    Raises:
        ConfigurationError: not a PrecisionMode subclass, not exactly one precision name, or
            the name (or an alias) is taken.
    """
    if not (isinstance(mode, type) and issubclass(mode, PrecisionMode)):
        raise ConfigurationError(f"register_mode: {mode!r} is not a subclass of PrecisionMode.")
    if len(mode.precisions) != 1:
        raise ConfigurationError(
            f"register_mode: {mode.__name__}.precisions is {mode.precisions!r}; a registered "
            "mode names exactly one new precision."
        )
    (name,) = mode.precisions
    register_precision(
        name,
        compute_dtype=compute_dtype,
        param_dtype=param_dtype,
        uses_scaler=uses_scaler,
        aliases=aliases,
    )
    MODES[name] = mode
    return mode


def unregister_mode(name: str) -> None:
    """Remove a mode added by :func:`register_mode` (and its precision name).

    Raises:
        ConfigurationError: ``name`` was not registered with :func:`register_mode`.
    """
    unregister_precision(name)
    MODES.pop(name, None)


def _owner(option: str) -> str | None:
    for name, cls in MODES.items():
        if option in cls.options:
            return name
    return None


def precision_mode(precision: str | Policy | PrecisionMode, **options: Any) -> PrecisionMode:
    """The mode of ``precision`` with ``options`` (the :class:`~ampkit.MixedPrecision`
    keywords of a mode: ``fp8_plan``, ``update_compensation``, ``bf16_true_keep_fp32``,
    ``bf16_true_state_precision``; a value of None counts as not given).

    A :class:`~ampkit.Policy` gives a mode bound to it; a spelling (not ``"auto"``) an
    unbound one (the doctor's: nothing about the hardware is asked); a mode is returned as is.

    Raises:
        ConfigurationError: an unknown or ``"auto"`` spelling, an option given for another
            precision (or for a mode object, which holds its own), or a bad option value.
    """
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(precision, PrecisionMode):
        if given:
            key = next(iter(given))
            raise ConfigurationError(
                f"{key}: given next to the mode object {precision!r}, which holds its own "
                f"options. Pass it to the mode ({type(precision).__name__}(...)) instead."
            )
        return precision
    if isinstance(precision, Policy):
        name = precision.precision
    else:
        parsed = parse_precision(precision)
        name = parsed.precision
        if name == "auto":
            raise ConfigurationError(
                "precision: 'auto' is decided by the hardware; resolve it first "
                "(resolve_precision) and pass the Policy.",
                argument="precision",
            )
    cls = MODES.get(name)
    if cls is None:
        raise ConfigurationError(
            f"precision: no precision mode is registered for {name!r}. Registered: "
            f"{', '.join(MODES)}.",
            argument="precision",
        )
    for key in given:
        if key not in cls.options:
            owner = _owner(key)
            applies = f"it applies to {owner} only. Drop {key}=, or ask for precision={owner!r}"
            raise ConfigurationError(
                f"{key}: given, but the precision is {name}; "
                + (applies if owner else f"no precision mode takes it. Drop {key}=")
                + "."
            )
    kwargs: Mapping[str, Any] = {cls.options[k]: v for k, v in given.items()}
    if isinstance(precision, Policy):
        return cls.from_policy(precision, kwargs)
    return cls.from_parsed(parsed, kwargs)

"""Precision modes: one class per mode, registered here and nowhere else.

* :class:`~ampkit.precision.modes.base.PrecisionMode` (``base``): the hooks every mode has;
* :class:`Fp32` (``fp32``), :class:`Mixed` (``mixed``: fp16 with loss scaling, bf16),
  :class:`Bf16True` (``bf16_true``), :class:`Fp8` (``fp8``).

:data:`MODES` maps each canonical precision name to its class; :func:`precision_mode` builds
the mode for a resolved :class:`~ampkit.Policy` (or a spelling, unbound), with the options of
that mode (its constructor's keywords). :func:`declared_fields` lists what the modes report
(:class:`ModeField`), which is all the Trainer and the command line know of a mode's metrics.
A new mode is a subclass in a new file plus one :func:`register_mode` call.

Registering a mode adds the precisions its class declares
(:attr:`~PrecisionMode.precision_facts`: names, dtypes, loss scaling) to
:mod:`ampkit.precision.spelling`, which the parser and the policy read. Nothing here, in
``base`` or in a mode's file imports torch when imported (the machinery of a mode is imported
inside its hooks), so ``ampkit train --help`` reads the modes' options (:func:`cli_options`)
without it. ``ampkit.precision`` imports this package first, so the built-in modes are
registered before any precision is parsed.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from ampkit.errors import ConfigurationError
from ampkit.precision.modes.base import (
    DoctorSection,
    ModeField,
    ModeOption,
    PrecisionMode,
    TrainingSetup,
)
from ampkit.precision.modes.bf16_true import Bf16True
from ampkit.precision.modes.fp8 import Fp8
from ampkit.precision.modes.fp32 import Fp32
from ampkit.precision.modes.mixed import Mixed
from ampkit.precision.spelling import (
    PrecisionFacts,
    add_precision,
    parse_precision,
    remove_precision,
)

if TYPE_CHECKING:
    import torch

    from ampkit.precision.policy import Policy

__all__ = [
    "MODES",
    "Bf16True",
    "DoctorSection",
    "Fp8",
    "Fp32",
    "Mixed",
    "ModeField",
    "ModeOption",
    "PrecisionMode",
    "TrainingSetup",
    "check_declared",
    "cli_options",
    "declared_fields",
    "declared_value",
    "mode_options",
    "precision_mode",
    "register_mode",
    "unregister_mode",
]

#: Canonical precision name -> the mode class that trains in it (each class's
#: :attr:`~PrecisionMode.precision_facts`, registered below).
MODES: dict[str, type[PrecisionMode]] = {}

for _builtin in (Fp32, Mixed, Bf16True, Fp8):
    for _facts in _builtin.precision_facts:
        add_precision(_facts, removable=False)
        MODES[_facts.name] = _builtin


def _dtype_name(dtype: torch.dtype | str) -> str:
    """``torch.bfloat16`` (or ``"bfloat16"``) -> ``"bfloat16"``, without importing torch."""
    return str(dtype).removeprefix("torch.")


def register_mode(
    mode: type[PrecisionMode],
    *,
    compute_dtype: torch.dtype | str | None = None,
    param_dtype: torch.dtype | str = "float32",
    uses_scaler: bool = False,
    aliases: tuple[str, ...] = (),
) -> type[PrecisionMode]:
    """Register a new mode class for its precision name (``mode.precisions``, one name):
    the name becomes a precision every command and ``resolve_precision`` accept. Returns
    ``mode``.

    The facts of its precision are the class's :attr:`~PrecisionMode.precision_facts` (one
    :class:`~ampkit.precision.spelling.PrecisionFacts`), or, for a class that declares none,
    the keywords.

    Args:
        mode: the :class:`PrecisionMode` subclass.
        compute_dtype: the dtype autocast runs matmuls and convolutions in (a torch dtype
            or its name); needed when the class declares no ``precision_facts``.
        param_dtype, uses_scaler, aliases: the rest of its facts, for such a class.

    Raises:
        ConfigurationError: not a PrecisionMode subclass, not exactly one precision name,
            facts both declared and given, no ``compute_dtype`` for a class without facts, or
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
    declared = mode.precision_facts
    if declared and compute_dtype is not None:
        raise ConfigurationError(
            f"register_mode: {mode.__name__} declares its precision_facts; drop "
            "compute_dtype= (and the other facts) from register_mode."
        )
    if declared:
        if len(declared) != 1 or declared[0].name != name:
            raise ConfigurationError(
                f"register_mode: {mode.__name__}.precision_facts must be one PrecisionFacts "
                f"named {name!r}, the class's precision."
            )
        facts = declared[0]
    elif compute_dtype is None:
        raise ConfigurationError(
            f"register_mode: {mode.__name__} declares no precision_facts. Declare "
            f"precision_facts = (PrecisionFacts({name!r}, compute_dtype=...),) on the class, "
            "or pass compute_dtype=."
        )
    else:
        facts = PrecisionFacts(
            name,
            tuple(aliases),
            compute_dtype=_dtype_name(compute_dtype),
            param_dtype=_dtype_name(param_dtype),
            uses_scaler=bool(uses_scaler),
        )
    add_precision(facts)
    MODES[name] = mode
    return mode


def unregister_mode(name: str) -> None:
    """Remove a mode added by :func:`register_mode` (and its precision name).

    Raises:
        ConfigurationError: ``name`` was not registered with :func:`register_mode`.
    """
    remove_precision(name)
    MODES.pop(name, None)


def cli_options() -> dict[str, tuple[ModeOption, tuple[str, ...]]]:
    """Every option the registered modes offer ``ampkit train`` (:attr:`~PrecisionMode.cli_options`),
    by name, with the canonical precisions whose mode takes it, in registration order."""
    found: dict[str, tuple[ModeOption, tuple[str, ...]]] = {}
    for precision, cls in MODES.items():
        for option in cls.cli_options:
            spec, owners = found.get(option.name, (option, ()))
            found[option.name] = (spec, (*owners, precision))
    return found


def declared_fields(kind: Literal["metric", "result"]) -> dict[str, ModeField]:
    """Every field the registered modes declare: ``"metric"``, the keys of their
    :meth:`~PrecisionMode.step_metrics` (:attr:`~PrecisionMode.metric_fields`); ``"result"``,
    those of their :meth:`~PrecisionMode.result_fields` (:attr:`~PrecisionMode.result_field_specs`).
    By name; the first mode declaring a name gives its :class:`ModeField`."""
    declared: dict[str, ModeField] = {}
    for cls in MODES.values():
        for spec in cls.metric_fields if kind == "metric" else cls.result_field_specs:
            declared.setdefault(spec.name, spec)
    return declared


def declared_value(
    record: object, values: Mapping[str, Any], name: str, kind: Literal["metric", "result"]
) -> Any:
    """``record.<name>`` for a name a mode declares (:func:`declared_fields` of ``kind``): its
    value in ``values`` (the record's mode dict), None when the run's mode did not set it.
    What ``StepMetrics``, ``FitResult`` and ``TrainSummary`` answer for such attributes.

    Raises:
        AttributeError: no registered mode declares ``name``.
    """
    if name.startswith("__") or name not in declared_fields(kind):
        raise AttributeError(f"{type(record).__name__!r} object has no attribute {name!r}")
    return values.get(name)


def check_declared(
    record: object, values: Mapping[str, Any], kind: Literal["metric", "result"]
) -> None:
    """Refuse keys of a mode's report (``values``) that no registered mode declares: a mode
    reports through its declared fields only.

    Raises:
        ConfigurationError: the undeclared keys, and where to declare them.
    """
    undeclared = sorted(set(values) - set(declared_fields(kind)))
    if undeclared:
        where = "metric_fields" if kind == "metric" else "result_field_specs"
        raise ConfigurationError(
            f"{type(record).__name__}: the precision mode reported {undeclared}, which no "
            f"registered mode declares. Declare each as a ModeField in the mode class's "
            f"{where}."
        )


def mode_options(cls: type[PrecisionMode]) -> tuple[str, ...]:
    """The options of a mode class: its constructor's keyword-only parameters (``Fp8``:
    ``plan``, ``emulate``, ...)."""
    return tuple(
        name
        for name, parameter in inspect.signature(cls.__init__).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    )


def _owner(option: str) -> str | None:
    for name, cls in MODES.items():
        if option in mode_options(cls):
            return name
    return None


def precision_mode(precision: str | Policy | PrecisionMode, **options: Any) -> PrecisionMode:
    """The mode of ``precision`` with ``options`` (keywords of that mode's constructor,
    :func:`mode_options`: ``Fp8``'s ``plan``, ...; a value of None counts as not given).

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
    from ampkit.precision.policy import Policy

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
    takes = mode_options(cls)
    for key in given:
        if key not in takes:
            owner = _owner(key)
            applies = f"it applies to {owner} only. Drop {key}=, or ask for precision={owner!r}"
            raise ConfigurationError(
                f"{key}: given, but the precision is {name}; "
                + (applies if owner else f"no precision mode takes it. Drop {key}=")
                + "."
            )
    if isinstance(precision, Policy):
        return cls.from_policy(precision, given)
    return cls.from_parsed(parsed, given)

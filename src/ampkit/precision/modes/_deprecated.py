"""The per-mode keywords of ``MixedPrecision`` and ``AmpkitPrecision`` before a mode object held
its own options, kept working for one release.

Each mode class lists its old keywords in ``options`` (old keyword -> its constructor's);
:func:`translate_old_keywords` turns them into the mode's own options with a
``DeprecationWarning`` that shows the new form (``MixedPrecision("bf16-true",
update_compensation="stochastic")`` -> ``MixedPrecision(precision=ampkit.Bf16True(
update_compensation="stochastic"))``). Nothing else in ampkit spells those keywords.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ampkit._kwargs import keyword_error
from ampkit._stack import user_stacklevel
from ampkit.precision.modes import MODES, PrecisionMode

__all__ = ["moved_mode_keywords", "translate_old_keywords"]


def _owner(keyword: str) -> type[PrecisionMode] | None:
    for cls in MODES.values():
        if keyword in cls.options:
            return cls
    return None


def moved_mode_keywords() -> dict[str, str]:
    """Each registered mode's old keywords -> the mode object that holds the option now
    (``"update_compensation"`` -> ``"precision=ampkit.Bf16True(update_compensation=...)"``),
    for the migration line of a class that no longer takes them (the Trainer)."""
    return {
        keyword: f"precision=ampkit.{cls.__name__}({option}=...)"
        for cls in MODES.values()
        for keyword, option in cls.options.items()
    }


def translate_old_keywords(
    caller: str, old: Mapping[str, Any], known: Iterable[str] = ()
) -> dict[str, Any]:
    """The mode options (constructor keywords) that the old keywords ``old`` of ``caller``
    (``"MixedPrecision"``) ask for; values of None are left out, as before.

    Args:
        caller: the class whose constructor took ``old``, as the message names it.
        old: the keywords given beyond the constructor's own.
        known: the constructor's own keywords, for a did-you-mean.

    Raises:
        KeywordError: a keyword no mode ever took (a ``TypeError``, with the closest keyword).

    Warns:
        DeprecationWarning: once per call, for each old keyword given, with the new form.
    """
    translated: dict[str, Any] = {}
    for keyword, value in old.items():
        owner = _owner(keyword)
        if owner is None:
            spellings = [*known, *(k for cls in MODES.values() for k in cls.options)]
            raise keyword_error(caller, keyword, spellings)
        if value is None:
            continue
        option = owner.options[keyword]
        warnings.warn(
            f"{caller}({keyword}=...) is deprecated: the option belongs to the precision mode "
            f"now. Write {caller}(precision=ampkit.{owner.__name__}({option}=...)); the "
            f"{keyword}= keyword will be removed in the next release.",
            DeprecationWarning,
            stacklevel=user_stacklevel(),
        )
        translated[option] = value
    return translated

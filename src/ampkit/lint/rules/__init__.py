"""The rules of ``ampkit lint``, one class per code; :data:`RULES` maps code to rule class."""

from __future__ import annotations

from ampkit.lint.rules import accumulation, contract, deprecated, precision, scaling, steps
from ampkit.lint.rules.base import RULES, Rule, register

__all__ = ["RULES", "Rule", "all_rules", "register"]

_MODULES = (accumulation, contract, deprecated, precision, scaling, steps)


def all_rules() -> list[type[Rule]]:
    """Every rule class, ordered by code."""
    return [RULES[code] for code in sorted(RULES)]

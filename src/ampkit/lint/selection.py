"""Which rule codes run: ``--select`` / ``--ignore`` values turned into a :class:`Selection`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ampkit.errors import ConfigurationError
from ampkit.lint.rules import RULES

__all__ = ["Selection"]


@dataclass(frozen=True)
class Selection:
    """Which codes run: ``select`` (default: all) minus ``ignore``; prefixes like ``AMP01`` work."""

    codes: frozenset[str]

    @classmethod
    def from_options(
        cls, select: Iterable[str] | None = None, ignore: Iterable[str] | None = None
    ) -> Selection:
        """Build a selection from ``--select``/``--ignore`` values (comma-separated allowed).

        Raises:
            ConfigurationError: a value matches no rule code.
        """
        chosen = _expand(select) if select is not None and _split(select) else set(RULES)
        return cls(frozenset(chosen - _expand(ignore or ())))

    def __contains__(self, code: object) -> bool:
        return code in self.codes


def _split(values: Iterable[str]) -> list[str]:
    return [part.strip().upper() for value in values for part in value.split(",") if part.strip()]


def _expand(values: Iterable[str]) -> set[str]:
    codes: set[str] = set()
    for value in _split(values):
        if value in ("ALL", "AMP"):
            codes |= set(RULES)
            continue
        matched = {code for code in RULES if code.startswith(value)}
        if not matched:
            raise ConfigurationError(
                f"unknown rule code {value!r}; known codes are {', '.join(sorted(RULES))} "
                "(or a prefix such as AMP00); run `ampkit lint --explain CODE` to see one"
            )
        codes |= matched
    return codes

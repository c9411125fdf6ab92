"""How a precision is spelled: the registry of precision names and the one parser of them.

Nothing here imports torch (``ampkit train --help`` and the ``--config`` checks read it). The
names are not written here: each precision mode declares its own on its class
(:attr:`~ampkit.precision.modes.base.PrecisionMode.precision_facts`, one
:class:`PrecisionFacts` per precision it trains in: the canonical name, its aliases, its dtypes
as torch dtype names, whether it scales the loss, fp8's recipe per spelling), and
:mod:`ampkit.precision.modes` adds them here (:func:`add_precision`) as it registers the modes.
:func:`parse_precision` reads a spelling against what was added; :data:`PRECISION_ALIASES` and
:data:`FP8_RECIPES` are live views of it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ampkit.errors import ConfigurationError

__all__ = [
    "FP8_RECIPES",
    "PRECISION_ALIASES",
    "ParsedPrecision",
    "PrecisionFacts",
    "add_precision",
    "parse_precision",
    "precision_facts",
    "registered_precisions",
    "remove_precision",
]

#: The torch dtype names a precision may compute or store its parameters in.
DTYPE_NAMES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class PrecisionFacts:
    """What one precision is, as its mode declares it (no torch objects: dtypes by name).

    Attributes:
        name: the canonical name (``"bf16"``), lower case.
        aliases: its other spellings (``"bf16-mixed"``, ``"bfloat16"``).
        compute_dtype: the torch dtype autocast runs matmuls and convolutions in, by name
            (``"bfloat16"``).
        param_dtype: the torch dtype the parameters are stored in, by name.
        uses_scaler: the loss is scaled (dynamic loss scaling: fp16's narrow exponent).
        recipes: fp8 only: the torchao float8 recipe each spelling names
            (``"fp8-rowwise"`` -> ``"rowwise"``).
    """

    name: str
    aliases: tuple[str, ...] = ()
    compute_dtype: str = "float32"
    param_dtype: str = "float32"
    uses_scaler: bool = False
    recipes: Mapping[str, str] = field(default_factory=dict)

    @property
    def spellings(self) -> tuple[str, ...]:
        """The name, then its aliases."""
        return (self.name, *self.aliases)


#: canonical name -> its facts, in registration order.
_FACTS: dict[str, PrecisionFacts] = {}
#: every spelling -> its canonical name.
_ALIASES: dict[str, str] = {}
#: Names added from outside ampkit (the built-in ones cannot be removed).
_REMOVABLE: set[str] = set()


def add_precision(facts: PrecisionFacts, *, removable: bool = True) -> None:
    """Make ``facts.name`` and its aliases precisions :func:`parse_precision` reads.

    Raises:
        ConfigurationError: a name or alias is taken (or ``"auto"``), not lower case, or a
            dtype is not a name of :data:`DTYPE_NAMES`.
    """
    for spelled in facts.spellings:
        if not isinstance(spelled, str) or spelled != spelled.strip().lower() or not spelled:
            raise ConfigurationError(
                f"register_precision: {spelled!r} is not a precision name; use a lower-case "
                "string without surrounding spaces."
            )
        if spelled == "auto" or spelled in _ALIASES:
            raise ConfigurationError(
                f"register_precision: {spelled!r} is taken (it names "
                f"{_ALIASES.get(spelled, 'auto')!r}). Pick another name."
            )
    for kind, dtype in (("compute_dtype", facts.compute_dtype), ("param_dtype", facts.param_dtype)):
        if dtype not in DTYPE_NAMES:
            raise ConfigurationError(
                f"register_precision: {kind} {dtype!r} is not a dtype a precision trains in. "
                f"Use one of {', '.join(DTYPE_NAMES)} (a torch dtype's name)."
            )
    _FACTS[facts.name] = facts
    _ALIASES.update((spelled, facts.name) for spelled in facts.spellings)
    if removable:
        _REMOVABLE.add(facts.name)


def remove_precision(name: str) -> None:
    """Remove a precision added with ``removable=True`` (and its aliases).

    Raises:
        ConfigurationError: ``name`` was not added so (the built-in names stay).
    """
    if name not in _REMOVABLE:
        raise ConfigurationError(
            f"unregister_precision: {name!r} was not added by register_precision; the built-in "
            "precisions cannot be removed."
        )
    facts = _FACTS.pop(name)
    for spelled in facts.spellings:
        _ALIASES.pop(spelled, None)
    _REMOVABLE.discard(name)


def precision_facts(name: str) -> PrecisionFacts:
    """The facts of a canonical precision name.

    Raises:
        ConfigurationError: no registered precision has that canonical name.
    """
    try:
        return _FACTS[name]
    except KeyError:
        raise ConfigurationError(
            f"precision: {name!r} is not a registered precision. Registered: {', '.join(_FACTS)}.",
            argument="precision",
        ) from None


def registered_precisions() -> tuple[str, ...]:
    """The canonical names, in registration order."""
    return tuple(_FACTS)


class _View(Mapping[str, str]):
    """A read-only mapping computed from the registry each time it is read."""

    def __init__(self, build: str) -> None:
        self._build = build

    def _data(self) -> dict[str, str]:
        if self._build == "aliases":
            return dict(_ALIASES)
        return {k: v for facts in _FACTS.values() for k, v in facts.recipes.items()}

    def __getitem__(self, key: str) -> str:
        return self._data()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __repr__(self) -> str:
        return repr(self._data())


#: Every accepted spelling and the canonical precision it names (``"auto"`` is resolved apart):
#: a read-only view of what the registered modes declare.
PRECISION_ALIASES: Mapping[str, str] = _View("aliases")

#: The torchao float8 recipe (``Float8LinearConfig.from_recipe_name``) each fp8 spelling names:
#: a read-only view of what the fp8 mode declares.
FP8_RECIPES: Mapping[str, str] = _View("recipes")


@dataclass(frozen=True)
class ParsedPrecision:
    """A precision as spelled, read: what :func:`parse_precision` returns.

    Attributes:
        precision: the canonical name (``"fp32"``, ``"fp16"``, ``"bf16"``, ``"bf16-true"``,
            ``"fp8"`` or a registered one), or ``"auto"`` (decided by the hardware).
        spelled: the spelling as given.
        fp8_recipe: fp8 only: torchao's recipe the spelling names (:data:`FP8_RECIPES`).
    """

    precision: str
    spelled: str
    fp8_recipe: str | None = None


#: Words for a precision that are not its name, and the name they mean (no close spelling).
_MEANT = {"half": "fp16", "single": "fp32", "full": "fp32", "float": "fp32", "bfloat": "bf16"}


def parse_precision(spelled: str) -> ParsedPrecision:
    """Read a precision's spelling (``"bf16-mixed"``, ``"fp8-rowwise"``, ``"auto"``, ...): the one
    parser every command, the engine and the Trainer use. Case and surrounding spaces are
    ignored.

    Raises:
        ConfigurationError: ``spelled`` is not a string or not a known name; the message lists
            the accepted names and the closest one.
    """
    key = spelled.strip().lower() if isinstance(spelled, str) else spelled
    if key == "auto":
        return ParsedPrecision("auto", str(spelled))
    if isinstance(key, str) and key in _ALIASES:
        facts = _FACTS[_ALIASES[key]]
        return ParsedPrecision(facts.name, spelled, facts.recipes.get(key))
    accepted = ["auto", *_ALIASES]
    guess = [_MEANT[key]] if key in _MEANT else difflib.get_close_matches(str(key), accepted, n=1)
    hint = f" Did you mean {guess[0]!r}?" if guess else ""
    raise ConfigurationError(
        f"precision: unknown precision {spelled!r}. Accepted: {', '.join(accepted)}.{hint}",
        argument="precision",
    )

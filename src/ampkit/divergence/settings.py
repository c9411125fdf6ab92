"""A side of a comparison, as spelled: ``fp32``, ``bf16``, ``fp16+compile``, ``compile``,
``bf16@runs/a`` (the weights of a run or checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass

from ampkit.errors import ConfigurationError
from ampkit.precision.policy import parse_precision

__all__ = ["Setting", "parse_setting"]

_FORMS = (
    "PRECISION[+compile][@WEIGHTS]: fp32, bf16, fp16, bf16-true, fp8 (or an alias), 'compile' "
    "alone for fp32 under torch.compile, 'eager' for plain fp32; @WEIGHTS loads a run folder, "
    "checkpoint or .safetensors file first (e.g. bf16@runs/a)"
)


@dataclass(frozen=True)
class Setting:
    """How one side runs the model.

    Attributes:
        spelled: the spelling given (the label in reports).
        precision: the precision's spelling for :class:`~ampkit.MixedPrecision`.
        compile: run the model under ``torch.compile`` (inductor).
        weights: a run folder, checkpoint or safetensors file to load into the model first.
    """

    spelled: str
    precision: str
    compile: bool = False
    weights: str | None = None


def parse_setting(spelled: str, argument: str = "a") -> Setting:
    """Read one side's spelling (see the module docstring).

    Raises:
        ConfigurationError: an unknown precision or modifier; the message names ``argument``.
    """
    if not isinstance(spelled, str) or not spelled.strip():
        raise ConfigurationError(
            f"{argument}: {spelled!r} is not a setting. Use {_FORMS}.", argument=argument
        )
    text, _, weights = spelled.strip().partition("@")
    parts = [p.strip().lower() for p in text.split("+")]
    compile_ = "compile" in parts
    rest = [p for p in parts if p not in ("compile", "eager")]
    if len(rest) > 1 or (weights == "" and "@" in spelled):
        raise ConfigurationError(
            f"{argument}: {spelled!r} is not a setting. Use {_FORMS}.", argument=argument
        )
    precision = rest[0] if rest else "fp32"
    try:
        parse_precision(precision)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{argument}: {str(exc).removeprefix('precision: ')} Spell a side as {_FORMS}.",
            argument=argument,
        ) from None
    return Setting(
        spelled=spelled.strip(), precision=precision, compile=compile_, weights=weights or None
    )

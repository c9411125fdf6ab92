"""``Fp32``: full precision. Autocast is an explicit fp32 region and nothing else changes, so
the engine's updates are bitwise those of the plain PyTorch loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ampkit.precision.modes.base import PrecisionMode
from ampkit.precision.spelling import ParsedPrecision, PrecisionFacts

__all__ = ["Fp32"]


class Fp32(PrecisionMode):
    """Train in fp32 (TF32 matmuls where the policy allows them).

    Example::

        Trainer(model, optimizer, max_steps=10, precision=ampkit.Fp32())
    """

    precision_facts: ClassVar[tuple[PrecisionFacts, ...]] = (
        PrecisionFacts("fp32", ("32", "32-true", "float32"), compute_dtype="float32"),
    )

    def __init__(self) -> None:
        super().__init__(ParsedPrecision("fp32", "fp32"))  # its own name: nothing to parse

    @classmethod
    def from_parsed(cls, parsed: ParsedPrecision, options: Mapping[str, Any]) -> PrecisionMode:
        return cls(**options)

"""``Mixed``: fp32 weights, matmuls and convolutions in fp16 or bf16 under autocast.

fp16's loss is scaled by the engine's :class:`~ampkit.LossScaler` (the policy says
``uses_scaler``); bf16 needs no scaling. The hooks are the base class's: the policy's autocast
region is all this mode changes.
"""

from __future__ import annotations

from typing import ClassVar

from ampkit.precision.modes.base import PrecisionMode
from ampkit.precision.spelling import ParsedPrecision, PrecisionFacts

__all__ = ["Mixed"]


class Mixed(PrecisionMode):
    """Mixed precision: fp32 weights and optimizer, fp16 or bf16 autocast.

    Args:
        precision: ``"bf16"`` (default), ``"fp16"`` or an alias (``"bf16-mixed"``,
            ``"16-mixed"``).

    Example::

        Trainer(model, optimizer, max_steps=10, precision=ampkit.Mixed("fp16"))

    Raises:
        ConfigurationError: ``precision`` is not fp16 or bf16 (or an alias).
    """

    precision_facts: ClassVar[tuple[PrecisionFacts, ...]] = (
        # fp16's narrow exponent (max 65504, subnormals below 6e-5) needs dynamic loss scaling
        PrecisionFacts(
            "fp16",
            ("fp16-mixed", "16-mixed", "float16"),
            compute_dtype="float16",
            uses_scaler=True,
        ),
        PrecisionFacts("bf16", ("bf16-mixed", "bfloat16"), compute_dtype="bfloat16"),
    )

    def __init__(self, precision: str | ParsedPrecision = "bf16") -> None:
        super().__init__(precision)

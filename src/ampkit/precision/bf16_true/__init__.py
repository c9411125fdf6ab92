"""Pure bf16 training (precision ``bf16-true``): bf16 weights and gradients, the optimizer
state in fp32 or bf16 (``state_precision``), with compensated updates so that small updates
are not rounded away.

- :func:`to_bf16_true` (``casting``): cast a model, keeping embeddings, norms and the final
  projection in fp32 unless told otherwise.
- :class:`CompensatedOptimizer` (``compensated``): Kahan summation or stochastic rounding
  around any torch optimizer, for the weights and (:data:`STATE_PRECISIONS`) its state.
- :func:`lost_update_fraction` and :class:`LostUpdates` (``lost_updates``): the probe.
"""

from __future__ import annotations

from ampkit.precision.bf16_true.casting import default_keep_fp32, to_bf16_true
from ampkit.precision.bf16_true.compensated import (
    COMPENSATIONS,
    STATE_PRECISIONS,
    CompensatedOptimizer,
    Compensation,
    StatePrecision,
    stochastic_round_bf16,
)
from ampkit.precision.bf16_true.lost_updates import (
    LOST_UPDATES_WARN_AT,
    LostUpdates,
    lost_update_counts,
    lost_update_fraction,
)

__all__ = [
    "COMPENSATIONS",
    "LOST_UPDATES_WARN_AT",
    "STATE_PRECISIONS",
    "CompensatedOptimizer",
    "Compensation",
    "LostUpdates",
    "StatePrecision",
    "default_keep_fp32",
    "lost_update_counts",
    "lost_update_fraction",
    "stochastic_round_bf16",
    "to_bf16_true",
]

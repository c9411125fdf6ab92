"""fp8 training on torchao's float8 Linears, with a measured per-layer plan.

- :func:`fp8_plan` (``planning``): decide per ``nn.Linear`` from its shape, the doctor's fp8
  range check of its activations and gradients, and (on CUDA) a timed microbenchmark.
- :func:`convert_to_fp8` (``convert``): apply the plan (torchao imported lazily).
"""

from __future__ import annotations

from ampkit.precision.fp8.convert import (
    RECIPES,
    convert_to_fp8,
    float8_config,
    fp8_layer_names,
    linear_kept_reason,
)
from ampkit.precision.fp8.planning import (
    Fp8Plan,
    LayerDecision,
    fp8_plan,
    predicted_speedup,
    size_prior,
)

__all__ = [
    "RECIPES",
    "Fp8Plan",
    "LayerDecision",
    "convert_to_fp8",
    "float8_config",
    "fp8_layer_names",
    "fp8_plan",
    "linear_kept_reason",
    "predicted_speedup",
    "size_prior",
]

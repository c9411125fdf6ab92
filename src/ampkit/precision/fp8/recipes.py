"""The error of each torchao fp8 recipe on one Linear, emulated on the CPU (or any device).

torchao offers three recipes (:data:`~ampkit.precision.fp8.convert.RECIPES`):

- ``tensorwise``: one scale per tensor for the input, the weight and the output gradient.
  torchao's default, and the only one whose weights FSDP2 can all-gather in fp8; an outlier
  anywhere in a tensor shrinks the resolution of all its other values.
- ``rowwise``: one scale per row of the input and of the output gradient, per output channel
  of the weight: an outlier costs only its own row (the recipe torchtitan made its default for
  accuracy).
- ``rowwise_with_gw_hp``: rowwise, with the weight gradient computed in high precision (bf16)
  instead of fp8.

:func:`recipe_errors` quantises a layer's real input, weight and output gradient the way
each recipe does (e4m3 forward, e5m2 gradients, scales from the absolute maximum) and returns
the error of the three GEMMs' results against fp32 (the output, the input gradient and the
weight gradient; each the mean over its rows of the row's relative error), the worst of the
three per recipe.
"""

from __future__ import annotations

import torch

__all__ = ["DEFAULT_RECIPE", "DEFAULT_WHY", "recipe_errors", "recommend_recipe"]

#: The recipe a plan uses unless told otherwise, and why.
DEFAULT_RECIPE = "tensorwise"
DEFAULT_WHY = (
    "tensorwise is the default: torchao's own default and the only recipe whose weights FSDP2 "
    "all-gathers in fp8; rowwise scales per row (an outlier costs only its row) and is "
    "recommended for a layer where it is measured more accurate"
)

_E4M3, _E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _quantize(x: torch.Tensor, dtype: torch.dtype, dim: int | None) -> torch.Tensor:
    """``x`` cast to fp8 ``dtype`` with an amax scale (per tensor, or per slice along
    ``dim``), and back to fp32."""
    top = torch.finfo(dtype).max
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = top / amax.clamp(min=1e-12)
    return (x * scale).to(dtype).float() / scale


def _relative(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """The mean over rows of each row's relative error: a row (a token) that a shared scale
    starved counts as much as the row holding the outlier."""
    norms = exact.norm(dim=-1)
    keep = norms > 0
    if not bool(keep.any()):
        return 0.0
    return float(((approx - exact).norm(dim=-1)[keep] / norms[keep]).mean())


def recipe_errors(
    x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor | None
) -> dict[str, float]:
    """The worst relative GEMM error of each recipe on one Linear (module docstring).

    Args:
        x: the layer's input, ``(M, K)`` (leading dims are flattened).
        weight: its weight, ``(N, K)``.
        grad_out: the gradient of its output, ``(M, N)``; None: the forward alone.
    """
    x = x.detach().reshape(-1, x.shape[-1]).float()
    w = weight.detach().float()
    y = x @ w.t()
    g = None if grad_out is None else grad_out.detach().reshape(-1, w.shape[0]).float()
    errors: dict[str, float] = {}
    for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        rowwise = recipe != "tensorwise"
        xq = _quantize(x, _E4M3, -1 if rowwise else None)  # per row of the input
        wq = _quantize(w, _E4M3, -1 if rowwise else None)  # per output channel
        worst = _relative(xq @ wq.t(), y)
        if g is not None:
            # grad_input = g @ w: scaled along the contraction dim N, per row of g
            gq = _quantize(g, _E5M2, -1 if rowwise else None)
            wq_n = _quantize(w, _E4M3, 0 if rowwise else None)
            worst = max(worst, _relative(gq @ wq_n, g @ w))
            # grad_weight = g.T @ x, contracting over M (per column of g and of x)
            if recipe == "rowwise_with_gw_hp":
                gw = g.t().bfloat16().float() @ x.bfloat16().float()
            else:
                gw = _quantize(g, _E5M2, 0 if rowwise else None).t() @ _quantize(
                    x, _E4M3, 0 if rowwise else None
                )
            worst = max(worst, _relative(gw, g.t() @ x))
        errors[recipe] = worst
    return errors


def recommend_recipe(
    errors: dict[str, float], speedups: dict[str, float] | None = None, *, slack: float = 1.1
) -> str:
    """The recipe to use for one layer: among the recipes within ``slack`` times the lowest
    error, the fastest measured one (``speedups``, CUDA); without timings the default when it
    is among them, else the most accurate."""
    best = min(errors.values())
    close = [r for r, e in errors.items() if e <= best * slack]
    if speedups:
        return max(close, key=lambda r: (speedups.get(r, 0.0), r == DEFAULT_RECIPE))
    return DEFAULT_RECIPE if DEFAULT_RECIPE in close else min(close, key=lambda r: errors[r])

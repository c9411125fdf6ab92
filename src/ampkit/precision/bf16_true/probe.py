"""The lost-updates probe: how many weight updates pure bf16 would round away (what
``ampkit doctor --precision bf16-true`` adds to its report).

:func:`probe_lost_updates` trains the model for a few steps in bf16-true (bf16 weights,
AdamW), once per update compensation, measuring every step with
:class:`~ampkit.precision.bf16_true.CompensatedOptimizer`; the model's parameters, buffers and gradients
are restored afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError
from ampkit.precision.bf16_true.casting import to_bf16_true
from ampkit.precision.bf16_true.compensated import CompensatedOptimizer, check_compensation
from ampkit.precision.bf16_true.lost_updates import LOST_UPDATES_WARN_AT

__all__ = ["LostUpdatesReport", "probe_lost_updates"]


@dataclass(frozen=True)
class LostUpdatesReport:
    """Share of intended updates lost, per compensation: overall and per parameter tensor
    (means over the probed steps).

    Attributes:
        steps: optimizer steps probed per compensation.
        lr: AdamW's learning rate in the probe.
        overall: compensation -> lost share over all bf16 tensors.
        per_tensor: compensation -> parameter name -> lost share.
        kept_fp32: modules kept in fp32 (their parameters are not probed).
    """

    steps: int
    lr: float
    overall: dict[str, float]
    per_tensor: dict[str, dict[str, float]]
    kept_fp32: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (shares as fractions, as in :attr:`overall`)."""
        data = asdict(self)
        data["kept_fp32"] = list(self.kept_fp32)
        return data

    def to_text(self, rows: int = 12) -> str:
        """A table: the tensors losing most updates without compensation, per compensation."""
        comps = list(self.overall)
        first = comps[0]
        names = sorted(self.per_tensor[first], key=lambda n: -self.per_tensor[first][n])[:rows]
        width = max([len("all bf16 parameters"), *(len(n) for n in names)])
        head = (
            f"lost updates in bf16-true ({self.steps} AdamW steps, lr {self.lr:g}; kept in "
            f"fp32: {', '.join(self.kept_fp32) or 'nothing'})"
        )
        lines = [head, "parameter".ljust(width) + "".join(f"  {c:>10}" for c in comps)]
        lines.append(
            "all bf16 parameters".ljust(width)
            + "".join(f"  {100 * self.overall[c]:>9.2f}%" for c in comps)
        )
        for n in names:
            lines.append(
                n.ljust(width) + "".join(f"  {100 * self.per_tensor[c][n]:>9.2f}%" for c in comps)
            )
        for c in comps:
            if c != "stochastic" and self.overall[c] > LOST_UPDATES_WARN_AT:
                lines.append(
                    f"warning: with update_compensation={c!r}, {100 * self.overall[c]:.1f}% of "
                    "the updates are rounded away (> "
                    f"{100 * LOST_UPDATES_WARN_AT:g}%): train with 'kahan' or 'stochastic'."
                )
        if "stochastic" in comps:
            lines.append(
                "stochastic rounding drops a small update on most steps but keeps it in "
                "expectation, so its share is not a loss."
            )
        return "\n".join(lines)


def probe_lost_updates(
    model: nn.Module,
    closure: Callable[[], torch.Tensor],
    *,
    steps: int = 3,
    lr: float = 2e-3,
    compensations: Sequence[str] = ("none", "kahan", "stochastic"),
    keep_fp32: Sequence[str | type[nn.Module]] | None = None,
) -> LostUpdatesReport:
    """Measure lost updates of ``steps`` bf16-true AdamW steps for each compensation.

    Args:
        model: the fp32 model the closure runs.
        closure: runs the forward pass on a batch and returns the loss.
        steps: optimizer steps per compensation (each from the same starting weights).
        lr: AdamW's learning rate (the smaller, the more updates fall under half an ulp).
        compensations: which of ``none``, ``kahan``, ``stochastic`` to probe.
        keep_fp32: as ``bf16_true_keep_fp32`` (None: embeddings, norms, final projection).

    Raises:
        ConfigurationError: ``steps < 1`` or an unknown compensation.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ConfigurationError(f"probe_lost_updates: steps={steps!r} is invalid. Use >= 1.")
    for comp in compensations:
        check_compensation(comp, "compensations")
    params = list(model.parameters())
    device = params[0].device if params else torch.device("cpu")
    saved = [(t, t.data.clone()) for t in [*params, *model.buffers()]]
    grads = [p.grad for p in params]
    names = {id(p): n for n, p in model.named_parameters()}
    overall: dict[str, float] = {}
    per_tensor: dict[str, dict[str, float]] = {}
    kept: list[str] = []
    try:
        for comp in compensations:
            kept = to_bf16_true(model, keep_fp32)
            opt = CompensatedOptimizer(torch.optim.AdamW(params, lr=lr), comp)  # type: ignore[arg-type]
            lost = wanted = 0
            sums: dict[str, float] = {}
            for _ in range(steps):
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss = closure()
                loss.backward()
                opt.measure_next_step()
                opt.step()
                opt.zero_grad(set_to_none=True)
                result = opt.lost_updates(names)
                if result is not None:
                    lost, wanted = lost + result.lost, wanted + result.wanted
                    for n, v in result.per_tensor.items():
                        sums[n] = sums.get(n, 0.0) + v / steps
            overall[comp] = lost / wanted if wanted else 0.0
            per_tensor[comp] = sums
            for tensor, value in saved:  # the next compensation starts from the same weights
                tensor.data = value.clone()
    finally:
        for tensor, value in saved:
            tensor.data = value
        for p, g in zip(params, grads, strict=True):
            p.grad = g
    return LostUpdatesReport(
        steps=steps, lr=lr, overall=overall, per_tensor=per_tensor, kept_fp32=tuple(kept)
    )

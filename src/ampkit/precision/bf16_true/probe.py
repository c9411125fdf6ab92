"""The lost-updates probe: how many weight updates, and how many updates of the optimizer
state, pure bf16 would round away (what ``ampkit doctor --precision bf16-true`` adds to its
report).

:func:`probe_lost_updates` trains the model for a few steps in bf16-true (bf16 weights,
AdamW), once per update compensation (state in fp32) and once per state precision (weights
Kahan-compensated), measuring every step with
:class:`~ampkit.precision.bf16_true.CompensatedOptimizer`; the model's parameters, buffers and
gradients are restored afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError
from ampkit.precision.bf16_true.casting import to_bf16_true
from ampkit.precision.bf16_true.compensated import (
    STATE_PRECISIONS,
    CompensatedOptimizer,
    check_compensation,
    check_state_precision,
)
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
        state_overall: state precision -> lost share of the optimizer-state updates (AdamW's
            ``exp_avg`` and ``exp_avg_sq`` of the bf16 parameters), with Kahan weights.
        state_per_tensor: state precision -> ``<parameter>.<key>`` -> lost share.
    """

    steps: int
    lr: float
    overall: dict[str, float]
    per_tensor: dict[str, dict[str, float]]
    kept_fp32: tuple[str, ...]
    state_overall: dict[str, float] = field(default_factory=dict)
    state_per_tensor: dict[str, dict[str, float]] = field(default_factory=dict)

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
        if self.state_overall:
            lines.append("")
            lines.append(self._state_text(rows))
        return "\n".join(lines)

    def _state_text(self, rows: int) -> str:
        """The optimizer-state table: one column per state precision."""
        precisions = list(self.state_overall)
        worst = "bf16" if "bf16" in precisions else precisions[-1]
        names = sorted(
            self.state_per_tensor[worst], key=lambda n: -self.state_per_tensor[worst][n]
        )[:rows]
        width = max([len("all state tensors"), *(len(n) for n in names)])
        col = max(len(p) for p in precisions) + 1
        lines = [
            f"lost optimizer-state updates ({self.steps} AdamW steps from a settled state: "
            "exp_avg / exp_avg_sq of the bf16 parameters, kahan weights) per state_precision",
            "state tensor".ljust(width) + "".join(f"  {p:>{col}}" for p in precisions),
            "all state tensors".ljust(width)
            + "".join(f"  {100 * self.state_overall[p]:>{col - 1}.2f}%" for p in precisions),
        ]
        for n in names:
            lines.append(
                n.ljust(width)
                + "".join(
                    f"  {100 * self.state_per_tensor[p].get(n, 0.0):>{col - 1}.2f}%"
                    for p in precisions
                )
            )
        if self.state_overall.get("bf16", 0.0) > LOST_UPDATES_WARN_AT:
            lines.append(
                f"warning: with state_precision='bf16', "
                f"{100 * self.state_overall['bf16']:.1f}% of the state updates are rounded away "
                f"(> {100 * LOST_UPDATES_WARN_AT:g}%): keep the state in 'fp32' (the default) or "
                "use 'bf16-stochastic'."
            )
        lines.append(
            "the state starts settled on the first gradient (as after 1,000 steps on a steady "
            "one); fp32 state rounds nothing, and under bf16-stochastic a dropped update is "
            "kept in expectation."
        )
        return "\n".join(lines)


#: AdamW's step count the state probe starts from: 1 / (1 - beta2) for torch's default beta2.
SETTLED_STEP = 1000


def _settle(opt: CompensatedOptimizer, state_precision: str) -> None:
    """Start AdamW's state of every bf16 parameter settled on its first gradient ``g``:
    ``exp_avg = g``, ``exp_avg_sq = g**2``, ``step`` = :data:`SETTLED_STEP`, where an EMA
    is after about ``1 / (1 - beta)`` steps on a steady gradient (from zeros it moves by
    large steps at first, which no format rounds away)."""
    dtype = torch.float32 if state_precision == "fp32" else torch.bfloat16
    for group in opt.param_groups:
        for p in group["params"]:
            if p.grad is None or p.dtype != torch.bfloat16:
                continue
            g = p.grad.float()
            opt.state[p] = {
                "step": torch.tensor(float(SETTLED_STEP)),
                "exp_avg": g.to(dtype),
                "exp_avg_sq": (g * g).to(dtype),
            }


def probe_lost_updates(
    model: nn.Module,
    closure: Callable[[], torch.Tensor],
    *,
    steps: int = 3,
    lr: float = 2e-3,
    compensations: Sequence[str] = ("none", "kahan", "stochastic"),
    keep_fp32: Sequence[str | type[nn.Module]] | None = None,
    state_precisions: Sequence[str] = STATE_PRECISIONS,
) -> LostUpdatesReport:
    """Measure lost updates of ``steps`` bf16-true AdamW steps for each compensation (weights;
    state in fp32), then for each state precision (optimizer state; Kahan weights; the state
    starts settled on the first gradient, as after 1,000 steps on a steady one).

    Args:
        model: the fp32 model the closure runs.
        closure: runs the forward pass on a batch and returns the loss.
        steps: optimizer steps per compensation (each from the same starting weights).
        lr: AdamW's learning rate (the smaller, the more updates fall under half an ulp).
        compensations: which of ``none``, ``kahan``, ``stochastic`` to probe.
        keep_fp32: as ``bf16_true_keep_fp32`` (None: embeddings, norms, final projection).
        state_precisions: which of ``fp32``, ``bf16-stochastic``, ``bf16-kahan``, ``bf16`` to
            probe (``()``: weights only).

    Raises:
        ConfigurationError: ``steps < 1``, an unknown compensation or state precision.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ConfigurationError(f"probe_lost_updates: steps={steps!r} is invalid. Use >= 1.")
    for comp in compensations:
        check_compensation(comp, "compensations")
    for precision in state_precisions:
        check_state_precision(precision, "state_precisions")
    params = list(model.parameters())
    device = params[0].device if params else torch.device("cpu")
    saved = [(t, t.data.clone()) for t in [*params, *model.buffers()]]
    grads = [p.grad for p in params]
    names = {id(p): n for n, p in model.named_parameters()}
    overall: dict[str, float] = {}
    per_tensor: dict[str, dict[str, float]] = {}
    state_overall: dict[str, float] = {}
    state_per_tensor: dict[str, dict[str, float]] = {}
    kept: list[str] = []
    runs = [(comp, "fp32", False) for comp in compensations]
    runs += [("kahan", precision, True) for precision in state_precisions]
    try:
        for comp, state_precision, of_state in runs:
            kept = to_bf16_true(model, keep_fp32)
            opt = CompensatedOptimizer(
                torch.optim.AdamW(params, lr=lr),  # type: ignore[arg-type]
                comp,  # type: ignore[arg-type]
                state_precision=state_precision,  # type: ignore[arg-type]
            )
            lost = wanted = 0
            sums: dict[str, float] = {}
            for _ in range(steps):
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss = closure()
                loss.backward()
                if of_state and not opt.state:
                    _settle(opt, state_precision)
                opt.measure_next_step()
                opt.step()
                opt.zero_grad(set_to_none=True)
                result = opt.lost_updates(names)
                if result is None:
                    continue
                if of_state:
                    lost, wanted = lost + result.state_lost, wanted + result.state_wanted
                    shares = result.state_per_tensor
                else:
                    lost, wanted = lost + result.lost, wanted + result.wanted
                    shares = result.per_tensor
                for n, v in shares.items():
                    sums[n] = sums.get(n, 0.0) + v / steps
            share = lost / wanted if wanted else 0.0
            if of_state:
                state_overall[state_precision], state_per_tensor[state_precision] = share, sums
            else:
                overall[comp], per_tensor[comp] = share, sums
            for tensor, value in saved:  # the next run starts from the same weights
                tensor.data = value.clone()
    finally:
        for tensor, value in saved:
            tensor.data = value
        for p, g in zip(params, grads, strict=True):
            p.grad = g
    return LostUpdatesReport(
        steps=steps,
        lr=lr,
        overall=overall,
        per_tensor=per_tensor,
        kept_fp32=tuple(kept),
        state_overall=state_overall,
        state_per_tensor=state_per_tensor,
    )

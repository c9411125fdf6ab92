"""Compensated updates for bf16 weights: Kahan summation or stochastic rounding.

:class:`CompensatedOptimizer` wraps any ``torch.optim`` optimizer over bf16 parameters. For
``step()`` it lends the wrapped optimizer fp32 copies of each bf16 parameter, its gradient and
its state, so the update is computed exactly as in fp32 whatever the optimizer, then stores
the result back in bf16:

- ``kahan``: round to nearest and keep the rounding residual in a bf16 buffer (optimizer
  state ``"compensation"``); the next step starts from weight + residual, so no update is
  lost, however small (Kahan summation of the updates).
- ``stochastic``: round up or down at random with the probability that makes the rounding
  unbiased; a small update is lost on most steps but kept in expectation.
- ``none``: round to nearest; updates under half an ulp of the weight vanish.

Memory at rest per bf16 parameter: weight 2 B, gradient 2 B, the wrapped optimizer's state in
bf16 (AdamW: 4 B) and, for ``kahan``, 2 B of compensation. During ``step()`` the fp32 copies
exist transiently (freed when it returns).

Why not torch-optimi or torchao's optimizers: torch-optimi's ``kahan_sum`` exists only in its
own optimizers and torchao's stochastic-rounding ``_AdamW`` only for AdamW (and compiles each
parameter shape on first use: 77 s on a 2-core CPU for a 4-tensor MLP); this wrapper keeps
the optimizer the user brought.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch

from ampkit.errors import ConfigurationError
from ampkit.precision.bf16_true.lost_updates import LostUpdates, lost_update_counts

__all__ = [
    "COMPENSATIONS",
    "COMPENSATION_KEY",
    "CompensatedOptimizer",
    "Compensation",
    "stochastic_round_bf16",
]

Compensation = Literal["kahan", "stochastic", "none"]
#: The accepted values of ``update_compensation``, in the order messages list them.
COMPENSATIONS: tuple[str, ...] = ("kahan", "stochastic", "none")
#: Optimizer-state key of the Kahan residual (saved and restored with the optimizer's state).
COMPENSATION_KEY = "compensation"


def stochastic_round_bf16(
    x: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Round fp32 values to bf16 up or down at random, unbiased: ``E[result] == x``.

    Adds uniform random bits below bf16's last mantissa bit to the fp32 bit pattern and
    truncates them, so a value 30% of the way to the next bf16 number rounds up 30% of the time.
    Uses the device's default generator unless ``generator`` is given.
    """
    bits = x.float().contiguous().view(torch.int32)
    noise = torch.randint(
        0, 1 << 16, bits.shape, dtype=torch.int32, device=x.device, generator=generator
    )
    truncated = (bits + noise) & -65536  # clear the 16 bits that bf16 drops
    return truncated.view(torch.float32).to(torch.bfloat16)  # exact: the low bits are zero


def check_compensation(value: object, name: str = "update_compensation") -> Compensation:
    """Return ``value`` if it is one of :data:`COMPENSATIONS`.

    Raises:
        ConfigurationError: any other value.
    """
    if value not in COMPENSATIONS:
        raise ConfigurationError(
            f"{name}: {value!r} is not a compensation. Use one of "
            f"{', '.join(repr(c) for c in COMPENSATIONS)} ('kahan' is the default for bf16-true).",
            argument=name,
        )
    return value  # type: ignore[return-value]


def _is_moment(key: str, value: object, param: torch.Tensor, dtype: torch.dtype) -> bool:
    """A per-element state tensor of ``param`` (momentum, second moment), not a step count."""
    return (
        key != "step"
        and torch.is_tensor(value)
        and value.dtype == dtype
        and value.shape == param.shape
    )


class _Lent:
    """One bf16 parameter lent to the wrapped optimizer as fp32 for the length of a step."""

    __slots__ = ("comp", "grad", "keys", "param", "weight")

    def __init__(self, param: torch.Tensor, state: dict[str, Any], kahan: bool) -> None:
        self.param, self.weight, self.grad = param, param.data, param.grad
        self.comp = state.pop(COMPENSATION_KEY, None) if kahan else None
        self.keys = [k for k, v in state.items() if _is_moment(k, v, param, torch.bfloat16)]
        param.data = self.effective()
        param.grad = self.grad.float()  # type: ignore[union-attr]
        for k in self.keys:
            state[k] = state[k].float()

    def effective(self) -> torch.Tensor:
        """The weight the optimizer sees: bf16 weight plus the Kahan residual, in fp32."""
        value = self.weight.float()
        return value.add_(self.comp.float()) if self.comp is not None else value


class CompensatedOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer`` so that its updates of bf16 parameters are compensated.

    The wrapper shares the wrapped optimizer's ``param_groups`` and ``state``: LR schedulers,
    ``zero_grad``, ``state_dict`` and checkpoints see one optimizer (the Kahan residuals are
    part of its state). Parameters that are not bf16 (fp32 islands) are updated as usual.

    Args:
        optimizer: any ``torch.optim.Optimizer`` over the (bf16) parameters.
        compensation: ``"kahan"``, ``"stochastic"`` or ``"none"``.
        generator: random bits for stochastic rounding (default: the device's generator, so
            the Trainer's RNG checkpointing covers it).

    Raises:
        ConfigurationError: not an optimizer, already wrapped, or an unknown compensation.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        compensation: Compensation = "kahan",
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        if isinstance(optimizer, CompensatedOptimizer) or not isinstance(
            optimizer, torch.optim.Optimizer
        ):
            seen = (
                "already a CompensatedOptimizer"
                if isinstance(optimizer, CompensatedOptimizer)
                else f"a {type(optimizer).__name__}"
            )
            raise ConfigurationError(
                f"CompensatedOptimizer: optimizer is {seen}. Pass the torch.optim optimizer "
                "over the bf16 parameters, once."
            )
        self.compensation = check_compensation(compensation, "compensation")
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups  # one list: add_param_group reaches both
        self.state = optimizer.state
        self.generator = generator
        self._measure_next = False
        self.last_lost: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def __repr__(self) -> str:
        return f"CompensatedOptimizer({self.compensation}, {self.optimizer!r})"

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped optimizer (state, Kahan residuals and all) and share its
        restored ``param_groups`` and ``state`` again."""
        self.optimizer.load_state_dict(state_dict)
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state

    def measure_next_step(self) -> None:
        """Count lost updates in the next ``step()`` (a few elementwise ops per parameter);
        read them with :meth:`lost_updates`."""
        self._measure_next = True

    def lost_updates(self, names: dict[int, str] | None = None) -> LostUpdates | None:
        """The lost updates of the last measured step (one host sync), or None if none was.

        ``names`` maps ``id(param)`` to a name (e.g. from ``model.named_parameters()``);
        unnamed tensors are called ``param<i>``.
        """
        if not self.last_lost:
            return None
        counts = torch.stack([torch.stack([lost, wanted]) for _, lost, wanted in self.last_lost])
        values = counts.cpu().tolist()
        per_tensor = {}
        for i, ((param, _, _), (lost, wanted)) in enumerate(
            zip(self.last_lost, values, strict=True)
        ):
            name = (names or {}).get(id(param), f"param{i}")
            per_tensor[name] = lost / wanted if wanted else 0.0
        return LostUpdates(
            per_tensor=per_tensor,
            lost=int(sum(v[0] for v in values)),
            wanted=int(sum(v[1] for v in values)),
            compensation=self.compensation,
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """Run the wrapped optimizer's step in fp32 and store bf16 weights, compensated.

        Raises:
            ConfigurationError: a closure was passed (it would re-run the forward pass on the
                fp32 copies; closure optimizers such as LBFGS are not supported).
        """
        if closure is not None:
            raise ConfigurationError(
                "CompensatedOptimizer.step: closures are not supported (the closure would see "
                "the fp32 copies lent for the step). Use an optimizer without a closure, or "
                "bf16 mixed precision."
            )
        measure, self._measure_next = self._measure_next, False
        lent = [
            _Lent(p, self.state[p], self.compensation == "kahan")
            for group in self.param_groups
            for p in group["params"]
            if p.grad is not None and p.dtype == torch.bfloat16
        ]
        try:
            self.optimizer.step()
        finally:
            if measure:
                self.last_lost = []
            for item in lent:
                self._store(item, measure)

    def _store(self, item: _Lent, measure: bool) -> None:
        param, state = item.param, self.state[item.param]
        target = param.data  # fp32 result of the wrapped optimizer
        if self.compensation == "stochastic":
            weight = stochastic_round_bf16(target, self.generator)
        else:
            weight = target.to(torch.bfloat16)
        comp = None
        if self.compensation == "kahan":
            comp = (target - weight.float()).to(torch.bfloat16)
            state[COMPENSATION_KEY] = comp
        if measure:
            before = item.effective()
            after = weight.float() if comp is None else weight.float().add_(comp.float())
            lost, wanted = lost_update_counts(before, after, target - before)
            self.last_lost.append((param, lost, wanted))
        param.data = weight
        param.grad = item.grad
        for k, v in list(state.items()):
            if _is_moment(k, v, param, torch.float32):
                state[k] = v.to(torch.bfloat16)

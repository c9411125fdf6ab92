"""Compensated updates for bf16 weights and optimizer state: Kahan summation or stochastic
rounding.

:class:`CompensatedOptimizer` wraps any ``torch.optim`` optimizer over bf16 parameters. For
``step()`` it lends the wrapped optimizer an fp32 stand-in for each bf16 parameter (its
value, its gradient and its state in fp32), so the update is computed exactly as in fp32
whatever the optimizer (foreach and fused kernels included), then stores the results back.

The weights, as ``compensation`` says:

- ``kahan``: round to nearest and keep the rounding residual in a bf16 buffer (optimizer
  state ``"compensation"``); the next step starts from weight + residual, so no update is
  lost, however small (Kahan summation of the updates).
- ``stochastic``: round up or down at random with the probability that makes the rounding
  unbiased; a small update is lost on most steps but kept in expectation.
- ``none``: round to nearest; updates under half an ulp of the weight vanish.

The optimizer's per-element state (Adam's ``exp_avg`` and ``exp_avg_sq``, SGD's
``momentum_buffer``), as ``state_precision`` says:

- ``fp32`` (default): kept in fp32 between steps; nothing is rounded.
- ``bf16-stochastic``: stored in bf16 with stochastic rounding (unbiased).
- ``bf16-kahan``: stored in bf16 with a bf16 residual per state tensor (state
  ``"<key>_compensation"``), as the weights under ``kahan``.
- ``bf16``: stored in bf16, rounded to nearest. AdamW's second moment with beta2 = 0.999
  moves by 0.1% of its value per step, under half a bf16 ulp: decreases are rounded away and
  only large increases land, so the stored moment ratchets up (measured: 1.3x the exact EMA
  after 2,000 steps, docs/low_precision.md).

The parameters themselves are never replaced: the stand-ins are separate tensors put in the
wrapped optimizer's ``param_groups`` (and their state under them) for the length of the
step, and the results are copied into the bf16 parameters in place. So autograd's gradient
accumulators, and with them DistributedDataParallel's reducer hooks, stay attached (swapping
``param.data`` for an fp32 tensor would make autograd drop them), and FSDP2's sharded
parameters (DTensors) keep their storage.

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
    "STATE_COMPENSATION_SUFFIX",
    "STATE_PRECISIONS",
    "CompensatedOptimizer",
    "Compensation",
    "StatePrecision",
    "missing_masters",
    "stochastic_round_bf16",
]

Compensation = Literal["kahan", "stochastic", "none"]
#: The accepted values of ``update_compensation``, in the order messages list them.
COMPENSATIONS: tuple[str, ...] = ("kahan", "stochastic", "none")
#: Optimizer-state key of the weights' Kahan residual (saved and restored with the state).
COMPENSATION_KEY = "compensation"

StatePrecision = Literal["fp32", "bf16-stochastic", "bf16-kahan", "bf16"]
#: The accepted values of ``state_precision``, in the order messages list them.
STATE_PRECISIONS: tuple[str, ...] = ("fp32", "bf16-stochastic", "bf16-kahan", "bf16")
#: ``"exp_avg" + STATE_COMPENSATION_SUFFIX``: the key of a state tensor's Kahan residual.
STATE_COMPENSATION_SUFFIX = "_compensation"


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


def check_state_precision(value: object, name: str = "state_precision") -> StatePrecision:
    """Return ``value`` if it is one of :data:`STATE_PRECISIONS`.

    Raises:
        ConfigurationError: any other value.
    """
    if value not in STATE_PRECISIONS:
        raise ConfigurationError(
            f"{name}: {value!r} is not a state precision. Use one of "
            f"{', '.join(repr(c) for c in STATE_PRECISIONS)} ('fp32' is the default for "
            "bf16-true).",
            argument=name,
        )
    return value  # type: ignore[return-value]


def _is_dtensor(t: torch.Tensor) -> bool:
    dtensor = getattr(getattr(torch.distributed, "tensor", None), "DTensor", None)
    return dtensor is not None and isinstance(t, dtensor)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's values of ``t`` (a DTensor's local shard, aliasing its storage)."""
    return t.to_local() if _is_dtensor(t) else t  # type: ignore[attr-defined]


def _like(local: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``local`` as a tensor of ``ref``'s kind: a DTensor with ``ref``'s layout if ``ref`` is one."""
    if not _is_dtensor(ref):
        return local
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(
        local,
        ref.device_mesh,  # type: ignore[attr-defined]
        ref.placements,  # type: ignore[attr-defined]
        run_check=False,
        shape=ref.shape,
        stride=ref.stride(),
    )


def _is_compensation_key(key: str) -> bool:
    return key == COMPENSATION_KEY or key.endswith(STATE_COMPENSATION_SUFFIX)


def _is_moment(key: str, value: object, param: torch.Tensor) -> bool:
    """A per-element state tensor of ``param`` (momentum, second moment), not a step count
    or a compensation buffer."""
    return (
        key != "step"
        and not _is_compensation_key(key)
        and torch.is_tensor(value)
        and value.is_floating_point()  # type: ignore[union-attr]
        and value.shape == param.shape  # type: ignore[union-attr]
    )


class _Lent:
    """One bf16 parameter lent to the wrapped optimizer as an fp32 stand-in for one step.

    ``proxy`` replaces the parameter in ``param_groups`` and keys its state; ``state``'s
    moments are fp32 tensors during the step. What was there before is kept here to store the
    results and to measure what rounding dropped.
    """

    __slots__ = ("comp", "fp32_before", "moments", "param", "proxy", "state")

    def __init__(
        self,
        param: torch.Tensor,
        state: dict[str, Any],
        kahan: bool,
        state_precision: str,
        measure: bool = False,
    ) -> None:
        self.param, self.state = param, state
        comp = state.pop(COMPENSATION_KEY, None) if kahan else None
        self.comp = comp
        value = _local(param).float()
        if comp is not None:
            value.add_(_local(comp).float())
        self.proxy = _like(value, param)
        self.proxy.grad = _like(_local(param.grad).float(), param)  # type: ignore[arg-type]
        # key -> (the bf16 tensor at rest or None if kept fp32, its residual or None)
        self.moments: dict[str, tuple[torch.Tensor | None, torch.Tensor | None]] = {}
        #: fp32 state at rest, copied before a measured step (to count what changed)
        self.fp32_before: dict[str, torch.Tensor] = {}
        for key, stored in list(state.items()):
            if not _is_moment(key, stored, param):
                continue
            residual = state.pop(key + STATE_COMPENSATION_SUFFIX, None)
            if stored.dtype == torch.float32 and residual is None:
                self.moments[key] = (None, None)  # fp32 at rest: lent as it is
                if measure:
                    self.fp32_before[key] = _local(stored).clone()
                continue
            lent = _local(stored).float()
            if residual is not None:
                lent.add_(_local(residual).float())
            state[key] = _like(lent, stored)
            keep = stored if stored.dtype == torch.bfloat16 and state_precision != "fp32" else None
            self.moments[key] = (keep, residual if keep is not None else None)

    def weight_before(self) -> torch.Tensor:
        """The weight the optimizer saw (bf16 weight plus residual), fp32, this rank's part."""
        value = _local(self.param).float()
        return value.add_(_local(self.comp).float()) if self.comp is not None else value


def _round(x: torch.Tensor, stochastic: bool, generator: torch.Generator | None) -> torch.Tensor:
    return stochastic_round_bf16(x, generator) if stochastic else x.to(torch.bfloat16)


def missing_masters(optimizer: CompensatedOptimizer, state_dict: dict[str, Any]) -> list[str]:
    """What the saved state of each bf16 parameter lacks for ``optimizer``'s settings, one
    entry per parameter (named as the state dict keys it): the Kahan residual of a weight
    under ``kahan``, fp32 moments under ``state_precision="fp32"``, a moment's residual under
    ``"bf16-kahan"``. A parameter without saved moments (never stepped) needs nothing."""
    keys = [key for group in state_dict.get("param_groups", []) for key in group["params"]]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved_all = state_dict.get("state", {})
    problems = []
    for key, param in zip(keys, params, strict=False):
        saved = saved_all.get(key) or {}
        if param.dtype != torch.bfloat16:
            continue
        moments = {k: v for k, v in saved.items() if _is_moment(k, v, param)}
        if not moments:
            continue
        lacks = []
        if optimizer.compensation == "kahan" and COMPENSATION_KEY not in saved:
            lacks.append(f"the weight's Kahan residual ({COMPENSATION_KEY!r})")
        for name, value in moments.items():
            if optimizer.state_precision == "fp32" and value.dtype != torch.float32:
                lacks.append(f"{name} in fp32 (saved in {str(value.dtype)[6:]})")
            elif (
                optimizer.state_precision == "bf16-kahan"
                and name + STATE_COMPENSATION_SUFFIX not in saved
            ):
                lacks.append(f"the residual of {name} ({name + STATE_COMPENSATION_SUFFIX!r})")
        if lacks:
            problems.append(f"parameter {key!r} lacks {', '.join(lacks)}")
    return problems


class CompensatedOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer`` so that its updates of bf16 parameters and of their state are
    computed in fp32 and stored compensated.

    The wrapper shares the wrapped optimizer's ``param_groups`` and ``state``: LR schedulers,
    ``zero_grad``, ``state_dict`` and checkpoints see one optimizer (the Kahan residuals and the
    fp32 state are part of its state, and ``load_state_dict`` keeps fp32 state fp32). Parameters
    that are not bf16 (fp32 islands) are updated as usual.

    Args:
        optimizer: any ``torch.optim.Optimizer`` over the (bf16) parameters.
        compensation: how the weights are stored: ``"kahan"``, ``"stochastic"`` or ``"none"``.
        state_precision: how the state of bf16 parameters is stored: ``"fp32"``,
            ``"bf16-stochastic"``, ``"bf16-kahan"`` or ``"bf16"`` (module docstring).
        generator: random bits for stochastic rounding (default: the device's generator, so
            the Trainer's RNG checkpointing covers it).

    Raises:
        ConfigurationError: not an optimizer, already wrapped, or an unknown compensation or
            state precision.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        compensation: Compensation = "kahan",
        *,
        state_precision: StatePrecision = "fp32",
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
        self.state_precision = check_state_precision(state_precision)
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups  # one list: add_param_group reaches both
        self.state = optimizer.state
        self.generator = generator
        self._measure_next = False
        #: (param, lost, wanted) per bf16 tensor of the last measured step: weights ...
        self.last_lost: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        #: ... and its state tensors ((param, key), lost, wanted).
        self.last_state_lost: list[tuple[tuple[torch.Tensor, str], torch.Tensor, torch.Tensor]] = []

    def __repr__(self) -> str:
        return (
            f"CompensatedOptimizer({self.compensation}, state {self.state_precision}, "
            f"{self.optimizer!r})"
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped optimizer (state, Kahan residuals and all) and share its
        restored ``param_groups`` and ``state`` again.

        torch casts every loaded floating state tensor to its parameter's dtype; fp32 state
        of a bf16 parameter is put back in fp32 here, so a resume is exact.

        Raises:
            CheckpointError: the state lacks what this compensation and state precision need
                to continue exactly (:func:`missing_masters`); nothing is loaded then.
        """
        missing = missing_masters(self, state_dict)
        if missing:
            from ampkit.errors import CheckpointError

            raise CheckpointError(
                f"CompensatedOptimizer.load_state_dict: the state lacks what "
                f"compensation={self.compensation!r}, state_precision={self.state_precision!r} "
                f"needs to continue exactly: {'; '.join(missing[:3])}"
                + (f" (and {len(missing) - 3} more)" if len(missing) > 3 else "")
                + ". Without them the bf16 weights (or state) resume rounded and drift from "
                "the saved run. Resume with the settings the checkpoint was saved with "
                "(Bf16True(update_compensation=..., state_precision=...)), or start fresh."
            )
        self.optimizer.load_state_dict(state_dict)
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for index, param in zip(saved_ids, params, strict=False):
            saved = state_dict["state"].get(index)
            loaded = self.state.get(param)
            if not saved or not loaded:
                continue
            for key, value in saved.items():
                now = loaded.get(key)
                if (
                    torch.is_tensor(value)
                    and torch.is_tensor(now)
                    and value.dtype == torch.float32
                    and now.dtype != torch.float32
                    and value.shape == now.shape
                ):
                    exact = torch.empty_like(now, dtype=torch.float32)
                    exact.copy_(value)
                    loaded[key] = exact

    def state_dtype(self, param: torch.Tensor) -> torch.dtype:
        """The dtype the per-element state of ``param`` is kept in (before any step: what it
        will be): fp32 for a bf16 parameter unless the state is stored in bf16, else the
        parameter's own dtype."""
        if param.dtype == torch.bfloat16 and self.state_precision == "fp32":
            return torch.float32
        return param.dtype

    def measure_next_step(self) -> None:
        """Count lost updates in the next ``step()`` (a few elementwise ops per tensor); read
        them with :meth:`lost_updates`."""
        self._measure_next = True

    def lost_updates(self, names: dict[int, str] | None = None) -> LostUpdates | None:
        """The lost updates of the last measured step (one host sync), or None if none was.

        ``names`` maps ``id(param)`` to a name (e.g. from ``model.named_parameters()``);
        unnamed tensors are called ``param<i>``. State tensors are named
        ``<parameter>.<key>`` (``fc.weight.exp_avg_sq``).
        """
        if not self.last_lost and not self.last_state_lost:
            return None
        index = {id(p): i for i, (p, _, _) in enumerate(self.last_lost)}

        def name(param: torch.Tensor) -> str:
            return (names or {}).get(id(param), f"param{index.get(id(param), 0)}")

        rows = [(lost, wanted) for _, lost, wanted in [*self.last_lost, *self.last_state_lost]]
        values = torch.stack([torch.stack(row) for row in rows]).cpu().tolist()
        weights, states = values[: len(self.last_lost)], values[len(self.last_lost) :]
        per_tensor = {
            name(p): (lost / wanted if wanted else 0.0)
            for (p, _, _), (lost, wanted) in zip(self.last_lost, weights, strict=True)
        }
        state_per_tensor = {
            f"{name(p)}.{key}": (lost / wanted if wanted else 0.0)
            for ((p, key), _, _), (lost, wanted) in zip(self.last_state_lost, states, strict=True)
        }
        return LostUpdates(
            per_tensor=per_tensor,
            lost=int(sum(v[0] for v in weights)),
            wanted=int(sum(v[1] for v in weights)),
            compensation=self.compensation,
            state_per_tensor=state_per_tensor,
            state_lost=int(sum(v[0] for v in states)),
            state_wanted=int(sum(v[1] for v in states)),
            state_precision=self.state_precision,
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """Run the wrapped optimizer's step in fp32 and store bf16 weights and state,
        compensated.

        Raises:
            ConfigurationError: a closure was passed (it would re-run the forward pass on the
                bf16 parameters while the optimizer updates fp32 stand-ins; closure
                optimizers such as LBFGS are not supported).
        """
        if closure is not None:
            raise ConfigurationError(
                "CompensatedOptimizer.step: closures are not supported (the closure would see "
                "the bf16 parameters, not the fp32 stand-ins the optimizer updates). Use an "
                "optimizer without a closure, or bf16 mixed precision."
            )
        measure, self._measure_next = self._measure_next, False
        kahan = self.compensation == "kahan"
        lent: list[tuple[list[Any], int, _Lent]] = []
        try:
            for group in self.param_groups:
                params = group["params"]
                for i, p in enumerate(params):
                    if p.grad is None or p.dtype != torch.bfloat16:
                        continue
                    state = self.state.pop(p, {})
                    item = _Lent(p, state, kahan, self.state_precision, measure)
                    lent.append((params, i, item))
                    params[i] = item.proxy
                    self.state[item.proxy] = item.state
            self.optimizer.step()
        finally:
            if measure:
                self.last_lost, self.last_state_lost = [], []
            for params, i, item in lent:  # the real parameters back, before anything can fail
                params[i] = item.param
                self.state.pop(item.proxy, None)
                self.state[item.param] = item.state
            for _, _, item in lent:
                self._store(item, measure)

    def _store(self, item: _Lent, measure: bool) -> None:
        """Write the step's fp32 results back into the bf16 parameter (in place) and state."""
        param, state = item.param, item.state
        target = _local(item.proxy)  # fp32 result of the wrapped optimizer
        weight = _round(target, self.compensation == "stochastic", self.generator)
        comp = None
        if self.compensation == "kahan":
            comp = (target - weight.float()).to(torch.bfloat16)
            state[COMPENSATION_KEY] = _like(comp, param)
        if measure:
            before = item.weight_before()
            after = weight.float() if comp is None else weight.float().add_(comp.float())
            lost, wanted = lost_update_counts(before, after, target - before)
            self.last_lost.append((param, lost, wanted))
        _local(param).copy_(weight)
        if self.state_precision == "fp32":  # the fp32 state stays as it is: nothing rounded
            for key, before in item.fp32_before.items() if measure else ():
                target = _local(state[key])
                lost, wanted = lost_update_counts(before, target, target - before)
                self.last_state_lost.append(((param, key), lost, wanted))
            return
        for key in [k for k, v in state.items() if _is_moment(k, v, param)]:
            kept, residual = item.moments.get(key, (None, None))
            self._store_moment(item, key, kept, residual, measure)

    def _store_moment(
        self,
        item: _Lent,
        key: str,
        kept: torch.Tensor | None,
        residual: torch.Tensor | None,
        measure: bool,
    ) -> None:
        """Round one fp32 state tensor to bf16 as ``state_precision`` says; ``kept`` is its
        bf16 tensor from before the step (None: new this step, or fp32 until now)."""
        state, value = item.state, item.state[key]
        target = _local(value)
        rounded = _round(target, self.state_precision == "bf16-stochastic", self.generator)
        new_residual = None
        if self.state_precision == "bf16-kahan":
            new_residual = (target - rounded.float()).to(torch.bfloat16)
        if measure and kept is not None:
            before = _local(kept).float()
            if residual is not None:
                before.add_(_local(residual).float())
            after = rounded.float()
            if new_residual is not None:
                after.add_(new_residual.float())
            lost, wanted = lost_update_counts(before, after, target - before)
            self.last_state_lost.append(((item.param, key), lost, wanted))
        if kept is not None:
            _local(kept).copy_(rounded)  # back into the bf16 tensor it was at rest
            state[key] = kept
        else:
            state[key] = _like(rounded, value)
        if new_residual is not None:
            state[key + STATE_COMPENSATION_SUFFIX] = _like(new_residual, value)

"""Dynamic loss scaling with bounds, hysteresis and skipped-step accounting.

fp16 has a narrow exponent: small gradients underflow to zero. Loss scaling multiplies the loss
by ``S`` before backward so gradients land in fp16's range, divides them by ``S`` before the
optimizer step, and skips the step when any gradient overflowed. ``S`` grows by
``growth_factor`` after ``growth_interval`` clean steps and shrinks by ``backoff_factor`` on
overflow. :class:`LossScaler` follows ``torch.amp.GradScaler`` (same fused unscale/inf-check
kernel, same call order) and adds what DeepSpeed and Apex users rely on:

* ``min_scale`` / ``max_scale`` bounds on the scale;
* ``hysteresis``: back off only on the N-th overflow since the scale last changed;
* skipped-step counters and a bounded history of scale changes, kept on the host so reading
  them never synchronises with the GPU;
* :class:`~ampkit.errors.NonFiniteTrainingError` after ``max_skips_at_min_scale`` consecutive
  skipped steps at the minimum scale, instead of silently skipping forever.

One training step, in the only correct order::

    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)        # optional, once: needed before clipping or reading grads
    clip_grad_norm_(params, max_norm)
    scaler.step(optimizer)            # skips optimizer.step() when a gradient is inf/NaN
    scaler.update()                   # adjusts the scale; once per iteration

:meth:`LossScaler.step` synchronises with the GPU once (it must know whether to step); nothing
else does. With ``enabled=False`` every method is a pass-through, so user code needs no ``if``.
"""

from __future__ import annotations

import enum
import inspect
import logging
import warnings
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ampkit._kwargs import check_keywords
from ampkit._validate import is_int, is_number
from ampkit.errors import ConfigurationError, NonFiniteTrainingError, ScalerStateError
from ampkit.precision import devices
from ampkit.precision._kernels import unscale_and_check_
from ampkit.precision._scaler_rules import (
    STATE_KEYS,
    default_bounds,
    settings_problem,
    state_problem,
    to_fp32,
)
from ampkit.precision.contract import check_dtype_contract

__all__ = ["GRADSCALER_KEYS", "LossScaler", "ScalerStats"]

#: The keys of ``torch.amp.GradScaler.state_dict()`` (enabled), which
#: :meth:`LossScaler.load_state_dict` takes over.
GRADSCALER_KEYS = frozenset(
    {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
)

_CALL_ORDER = (
    "The order per iteration is: scale(loss).backward() -> unscale_(optimizer) (optional, once) "
    "-> step(optimizer) -> update()."
)


class _OptState(enum.Enum):
    READY = "ready"
    UNSCALED = "unscaled"
    STEPPED = "stepped"


@dataclass
class _OptRecord:
    """Where one optimizer is in the current iteration."""

    state: _OptState = _OptState.READY
    found_inf: dict[torch.device, torch.Tensor] | None = None  # per device, set by unscale_
    skipped: bool = False  # decided by step


@dataclass(frozen=True)
class ScalerStats:
    """A snapshot of loss-scaling telemetry (host values; reading it never syncs the GPU).

    Attributes:
        steps: optimizer steps attempted (calls of ``update()``), skipped ones included.
        skipped_steps: steps skipped because a gradient was inf/NaN.
        scale: the loss scale the next backward will use (1.0 when scaling is disabled).
        consecutive_skips: skipped steps since the last successful one.
        scale_history: ``(step, scale)`` at start and at each change of scale, newest last,
            bounded to the most recent ``history_size`` changes.
    """

    steps: int
    skipped_steps: int
    scale: float
    consecutive_skips: int
    scale_history: tuple[tuple[int, float], ...]

    @property
    def skip_rate(self) -> float:
        """Fraction of attempted steps that were skipped (0.0 before the first step)."""
        return self.skipped_steps / self.steps if self.steps else 0.0


@check_keywords
class LossScaler:
    """Dynamic loss scaler for fp16 training. See the module docstring for the call order.

    The first five arguments are ``torch.amp.GradScaler``'s, in its order, and so are its
    public methods (``scale`` of a tensor or nested iterables, ``unscale_``, ``step`` returning
    what ``optimizer.step()`` returns, ``update(new_scale)``, ``get_scale``, ``is_enabled``,
    ``get_/set_growth_factor``, ``get_/set_backoff_factor``, ``get_/set_growth_interval``,
    pickling), so ``LossScaler("cuda", init_scale=2.0**16)`` replaces
    ``GradScaler("cuda", init_scale=2.0**16)`` and :meth:`load_state_dict` accepts a
    ``GradScaler.state_dict()``. Optimizers with ``_step_supports_amp_scaling`` (torch's fused
    Adam/AdamW/SGD) are handed ``grad_scale`` and ``found_inf`` and unscale themselves, as
    GradScaler does. With the default bounds the two compute bitwise the same weights and
    scales until the scale would leave ``[min_scale, max_scale]`` (GradScaler has no bounds)
    or ``max_skips_at_min_scale`` stops a run GradScaler would go on skipping.

    Args:
        device: the device the gradients live on (``"cuda"``, ``"cpu"``, ...), as GradScaler's
            first argument; recorded as :attr:`device`. The scale itself is a host number, so
            nothing is allocated on it.
        init_scale: the first scale: a positive number finite in fp32 (it is kept in fp32, as
            GradScaler keeps it). The default bounds widen to take it in.
        growth_factor: multiplier after ``growth_interval`` clean steps; must be > 1.
        backoff_factor: multiplier on overflow; must be in (0, 1).
        growth_interval: clean steps between growths; integer >= 1.
        enabled: when False, ``scale`` returns the loss unchanged, ``unscale_`` does nothing and
            ``step`` always steps; counters still count steps.
        min_scale: the scale never backs off below this (> 0). None: 1.0, or ``init_scale``
            when that is smaller.
        max_scale: the scale never grows above this (finite in fp32). None: ``2**24``, or
            ``init_scale`` when that is larger.
        hysteresis: overflows tolerated since the scale last changed before backing off
            (1 = back off on every overflow, as ``torch.amp.GradScaler`` does). Every overflow
            still skips its step.
        max_skips_at_min_scale: raise :class:`NonFiniteTrainingError` after this many
            consecutive skipped steps taken at ``min_scale``; None never raises.
        history_size: how many scale changes :attr:`stats` remembers.
        process_group: the group whose ranks must agree on skipping (default: the world, when
            ``torch.distributed`` is initialised). One rank's inf/NaN skips the step everywhere.

    Raises:
        ConfigurationError: an argument is out of range (the message says which and why).
    """

    def __init__(
        self,
        device: str | torch.device | None = None,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        *,
        min_scale: float | None = None,
        max_scale: float | None = None,
        hysteresis: int = 1,
        max_skips_at_min_scale: int | None = 10,
        history_size: int = 1024,
        process_group: Any = None,
    ) -> None:
        low, high = default_bounds(init_scale, min_scale, max_scale)
        problem = settings_problem(
            enabled=enabled,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            hysteresis=hysteresis,
            min_scale=low,
            max_scale=high,
            scale=init_scale,
            max_skips_at_min_scale=max_skips_at_min_scale,
            history_size=history_size,
        )
        if problem:
            name, value, allowed = problem
            raise ConfigurationError(
                f"LossScaler: {name}={value!r} is invalid. {name} must be {allowed}."
            )
        try:
            self.device: torch.device | None = None if device is None else torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ConfigurationError(
                f"LossScaler: device={device!r} is not a device. Pass a device name such as "
                "'cuda', 'cpu' or 'mps' (as torch.amp.GradScaler's first argument), or None."
            ) from exc
        self._enabled = enabled
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        self.min_scale = float(low)  # type: ignore[arg-type]
        self.max_scale = float(high)  # type: ignore[arg-type]
        self.hysteresis = hysteresis
        self.max_skips_at_min_scale = max_skips_at_min_scale
        self.process_group = process_group
        self._scale = to_fp32(init_scale)
        self._growth_tracker = 0
        self._hysteresis_left = hysteresis
        self._steps = 0
        self._skipped = 0
        self._consecutive_skips = 0
        self._skips_at_min = 0
        self._history: deque[tuple[int, float]] = deque([(0, self._scale)], maxlen=history_size)
        self._per_optimizer: dict[int, _OptRecord] = {}
        self._last_found_inf = False
        self._scale_tensors: dict[torch.device, tuple[float, torch.Tensor]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings and counters; the per-device scale tensors are a cache."""
        state = self.__dict__.copy()
        state["_scale_tensors"] = {}
        return state

    # -- queries and settings (GradScaler's names) ----------------------------------------

    def is_enabled(self) -> bool:
        """Whether loss scaling is active."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled). A host value: no GPU sync."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        """The scale's multiplier after ``growth_interval`` clean steps."""
        return self.growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Set the growth factor (a finite number > 1).

        Raises:
            ConfigurationError: ``new_factor`` is out of range.
        """
        self._check_setting("growth_factor", new_factor)
        self.growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        """The scale's multiplier on an overflow."""
        return self.backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Set the backoff factor (in (0, 1)).

        Raises:
            ConfigurationError: ``new_factor`` is out of range.
        """
        self._check_setting("backoff_factor", new_factor)
        self.backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        """Clean steps between two growths of the scale."""
        return self.growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Set the growth interval (an integer >= 1). The clean steps counted so far stay
        counted; the scale grows when they reach the new interval.

        Raises:
            ConfigurationError: ``new_interval`` is out of range.
        """
        self._check_setting("growth_interval", new_interval)
        self.growth_interval = new_interval
        self._growth_tracker = min(self._growth_tracker, new_interval - 1)

    def _check_setting(self, name: str, value: object) -> None:
        settings: dict[str, Any] = {
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            name: value,
        }
        problem = settings_problem(
            hysteresis=self.hysteresis,
            min_scale=self.min_scale,
            max_scale=self.max_scale,
            scale=self._scale,
            **settings,
        )
        if problem:
            name, value, allowed = problem
            raise ConfigurationError(
                f"LossScaler.set_{name}: {value!r} is invalid. {name} must be {allowed}."
            )

    @property
    def stats(self) -> ScalerStats:
        """Telemetry snapshot; cheap and sync-free, so it can be read every step."""
        return ScalerStats(
            steps=self._steps,
            skipped_steps=self._skipped,
            scale=self.get_scale(),
            consecutive_skips=self._consecutive_skips,
            scale_history=tuple(self._history) if self._enabled else ((0, 1.0),),
        )

    @property
    def last_step_skipped(self) -> bool:
        """Whether the most recent ``update()`` recorded a skipped step."""
        return self._last_found_inf

    # -- the step protocol ---------------------------------------------------------------

    def _scale_tensor(self, device: torch.device) -> torch.Tensor:
        """The scale as a 0-dim fp32 tensor on ``device`` (made once per scale and device)."""
        value, cached = self._scale_tensors.get(device, (None, None))
        if cached is None or value != self._scale:
            cached = torch.full((), self._scale, dtype=torch.float32, device=device)
            self._scale_tensors[device] = (self._scale, cached)
        return cached

    def scale(self, outputs: Any) -> Any:
        """Multiply a tensor, or the tensors of a (nested) list, tuple or other iterable, by
        the scale; returned unchanged when disabled. Ready for ``backward()``.

        The scale is a 0-dim fp32 tensor, as GradScaler's: an fp16 scalar loss comes back in
        fp32 (an fp16 loss times 65536 would overflow to inf), a loss of another shape keeps
        its dtype. Lists and tuples come back as lists and tuples; other iterables as lazy
        iterators (``map``), as GradScaler returns them.

        Raises:
            ConfigurationError: ``outputs`` holds something that is not a tensor (a
                ``ValueError``, as GradScaler raises).
        """
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            return outputs * self._scale_tensor(outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(item) for item in outputs)
        if isinstance(outputs, Iterable) and not isinstance(outputs, (str, bytes)):
            return map(self.scale, outputs)
        raise ConfigurationError(
            f"LossScaler.scale: got a {type(outputs).__name__}. Pass a tensor (the loss) or an "
            "iterable of tensors (several losses)."
        )

    def _record_for(self, optimizer: torch.optim.Optimizer) -> _OptRecord:
        if id(optimizer) not in self._per_optimizer:  # its first step: say what it trains in
            check_dtype_contract(optimizer, caller="LossScaler")
        return self._per_optimizer.setdefault(id(optimizer), _OptRecord())

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place and record any inf/NaN.

        Call it (once) before clipping or inspecting gradients; ``step`` calls it otherwise.

        Raises:
            ScalerStateError: called twice, or after ``step()``, before ``update()``.
            ConfigurationError: a gradient is fp16 (a ``ValueError``, as GradScaler raises):
                the weights are fp16 (``model.half()``), which lose small updates and overflow.
        """
        if not self._enabled:
            return
        record = self._record_for(optimizer)
        if record.state is _OptState.UNSCALED:
            raise ScalerStateError(
                "unscale_() has already been called on this optimizer since the last update(); "
                "a second call would divide the gradients by the scale twice. " + _CALL_ORDER
            )
        if record.state is _OptState.STEPPED:
            raise ScalerStateError(
                "unscale_() was called after step() and before update(). " + _CALL_ORDER
            )
        params = [p for group in optimizer.param_groups for p in group["params"]]
        half = sum(p.grad is not None and p.grad.dtype == torch.float16 for p in params)
        if half:
            raise ConfigurationError(
                f"LossScaler.unscale_: {half} of the optimizer's gradients are fp16, so its "
                "parameters are fp16 (model.half() or .to(torch.float16)). Loss scaling is for "
                "fp32 weights trained under fp16 autocast; fp16 weights lose every update "
                "smaller than half an fp16 ulp. Keep the model in fp32 and run the forward "
                "under torch.autocast(device_type, dtype=torch.float16)."
            )
        record.found_inf = unscale_and_check_(params, 1.0 / self._scale)
        record.state = _OptState.UNSCALED

    def _found_inf_tensor(self, found: dict[torch.device, torch.Tensor]) -> torch.Tensor | None:
        """Reduce the per-device flags to one 0-dim tensor, the same on every rank (None: no
        gradient here and no other rank to ask)."""
        dist = torch.distributed
        distributed = (
            dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size(self.process_group) > 1
        )
        if not found:
            if not distributed:
                return None
            # This rank has no gradients but must still take part in the collective.
            device = devices.collective_device(dist.get_backend(self.process_group))
            found = {device: torch.zeros((), device=device)}
        first = next(iter(found.values()))
        total = torch.stack([flag.to(first.device) for flag in found.values()]).amax()
        if distributed:
            dist.all_reduce(total, op=dist.ReduceOp.MAX, group=self.process_group)
        return total

    def _found_inf(self, found: dict[torch.device, torch.Tensor]) -> bool:
        """Reduce the per-device flags to one decision, the same on every rank."""
        total = self._found_inf_tensor(found)
        return total is not None and bool(total.item())  # the one GPU sync per step

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Unscale if not done yet, then call ``optimizer.step(*args, **kwargs)`` unless a
        gradient is inf/NaN.

        An optimizer with ``_step_supports_amp_scaling = True`` unscales and skips by itself,
        as with GradScaler: its ``step`` is called with ``grad_scale`` (the scale, or None
        after ``unscale_``) and ``found_inf`` set on it, or, if its ``step`` takes a
        ``grad_scaler`` keyword, with ``grad_scaler=self`` (a ``FutureWarning``: GradScaler
        is retiring that form).

        Returns:
            What ``optimizer.step()`` returned; None when the step was skipped. Whether it
            was skipped: :meth:`step_all` returns it, and :attr:`last_step_skipped` after
            :meth:`update`.

        Raises:
            ScalerStateError: ``step()`` called twice before ``update()``.
            ConfigurationError: a closure was passed while scaling (LBFGS-style optimizers
                re-evaluate the loss, which the scaler cannot see).
        """
        record = self._record_for(optimizer)
        if not self._enabled:
            record.state = _OptState.STEPPED
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs or (args and callable(args[0])):
            raise ConfigurationError(
                "LossScaler.step: closures are not supported with fp16 loss scaling (the "
                "closure's loss would be unscaled). Use bf16 or fp32 with closure-based "
                "optimizers such as LBFGS."
            )
        if record.state is _OptState.STEPPED:
            raise ScalerStateError(
                "step() has already been called on this optimizer since the last update(). "
                + _CALL_ORDER
            )
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            return self._step_self_scaling(optimizer, record, args, kwargs)
        if record.state is _OptState.READY:
            self.unscale_(optimizer)
        record.skipped = self._found_inf(record.found_inf or {})
        record.state = _OptState.STEPPED
        return None if record.skipped else optimizer.step(*args, **kwargs)

    def _step_self_scaling(
        self, optimizer: Any, record: _OptRecord, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``step`` of an optimizer that unscales and skips by itself (GradScaler's contract)."""
        if "grad_scaler" in inspect.signature(optimizer.step).parameters:
            warnings.warn(
                "LossScaler.step: this optimizer's step() takes grad_scaler=; the scaler passes "
                "itself, as torch.amp.GradScaler does for now. GradScaler is retiring that form "
                "for the grad_scale and found_inf attributes: drop the grad_scaler parameter "
                "and read optimizer.grad_scale / optimizer.found_inf instead.",
                FutureWarning,
                stacklevel=3,
            )
            result = optimizer.step(*args, **{**kwargs, "grad_scaler": self})
            record.skipped = self._found_inf(record.found_inf or {})
            record.state = _OptState.STEPPED
            return result
        if record.state is _OptState.READY:
            # Check without unscaling (a multiply by 1): the optimizer unscales in its kernel.
            params = (p for group in optimizer.param_groups for p in group["params"])
            record.found_inf = unscale_and_check_(params, 1.0)
        found = self._found_inf_tensor(record.found_inf or {})
        device = found.device if found is not None else self.device or torch.device("cpu")
        if found is None:
            found = torch.zeros((), dtype=torch.float32, device=device)
        if record.state is _OptState.UNSCALED:
            optimizer.grad_scale = getattr(optimizer, "grad_scale", None)
        else:
            optimizer.grad_scale = self._scale_tensor(device) * getattr(optimizer, "grad_scale", 1)
        optimizer.found_inf = found
        try:
            result = optimizer.step(*args, **kwargs)
        finally:
            del optimizer.grad_scale, optimizer.found_inf
        record.skipped = bool(found.item())  # the step's one sync, as for other optimizers
        record.state = _OptState.STEPPED
        return result

    def step_all(self, optimizers: Sequence[torch.optim.Optimizer]) -> bool:
        """Step every optimizer of one iteration, or none of them: one decision to skip.

        Unscales those not unscaled yet, reduces their inf/NaN flags to one decision (one GPU
        sync, one all-reduce under ``torch.distributed``), then calls ``step()`` on each unless
        any gradient of any of them is inf/NaN. ``torch.amp.GradScaler`` decides per
        optimizer (one optimizer may step while another skips); calling :meth:`step` once
        per optimizer does the same here.

        Returns:
            True if the optimizers stepped, False if the step was skipped for all of them.

        Raises:
            ScalerStateError: an optimizer was already stepped since the last ``update()``.
            ConfigurationError: ``optimizers`` is empty or names one optimizer twice.
        """
        optimizers = list(optimizers)
        if not optimizers or len({id(o) for o in optimizers}) != len(optimizers):
            raise ConfigurationError(
                f"LossScaler.step_all: got {len(optimizers)} optimizers, some of them the same "
                "one or none at all; pass each optimizer of the iteration once."
            )
        records = [self._record_for(o) for o in optimizers]
        if any(r.state is _OptState.STEPPED for r in records):
            raise ScalerStateError(
                "step_all() got an optimizer already stepped since the last update(). "
                + _CALL_ORDER
            )
        if not self._enabled:
            for optimizer, record in zip(optimizers, records, strict=True):
                optimizer.step()
                record.state = _OptState.STEPPED
            return True
        found: dict[torch.device, torch.Tensor] = {}
        for optimizer, record in zip(optimizers, records, strict=True):
            if record.state is _OptState.READY:
                self.unscale_(optimizer)
            for device, flag in (record.found_inf or {}).items():
                found[device] = flag if device not in found else torch.maximum(found[device], flag)
        skipped = self._found_inf(found)
        for optimizer, record in zip(optimizers, records, strict=True):
            if not skipped:
                optimizer.step()
            record.skipped = skipped
            record.state = _OptState.STEPPED
        return not skipped

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Adjust the scale from this iteration's overflow result, once per iteration.

        ``new_scale`` (a number, or a 1-element tensor without grad) sets the scale instead,
        as GradScaler's ``update(new_scale)`` does: the growth tracker and hysteresis are left
        as they are, and the iteration's steps (if any) are still counted.

        Raises:
            ScalerStateError: no ``step()`` since the last ``update()`` (and no ``new_scale``).
            ConfigurationError: ``new_scale`` is not a positive number within
                ``[min_scale, max_scale]``.
            NonFiniteTrainingError: ``max_skips_at_min_scale`` consecutive steps were skipped at
                ``min_scale``: gradients are inf/NaN whatever the scale, so the model itself
                produces them.
        """
        stepped = [r for r in self._per_optimizer.values() if r.state is _OptState.STEPPED]
        if new_scale is not None:
            value = self._check_new_scale(new_scale)
            self._per_optimizer.clear()
            if stepped:
                self._count_outcome(any(r.skipped for r in stepped))
            if self._enabled:
                self._set_scale(value)
            return
        if not stepped:
            raise ScalerStateError(
                "update() was called without a step() since the last update(). " + _CALL_ORDER
            )
        found_inf = any(r.skipped for r in stepped)
        self._per_optimizer.clear()
        self._apply_outcome(found_inf)

    def _check_new_scale(self, new_scale: object) -> float:
        value: object = new_scale
        if isinstance(new_scale, torch.Tensor):
            if new_scale.numel() != 1 or new_scale.requires_grad:
                raise ConfigurationError(
                    f"LossScaler.update: new_scale is a tensor of shape {tuple(new_scale.shape)}"
                    f"{' that requires grad' if new_scale.requires_grad else ''}. Pass a number "
                    "or a 1-element tensor with requires_grad=False."
                )
            value = new_scale.item()
        if not (is_number(value) and self.min_scale <= value <= self.max_scale):
            raise ConfigurationError(
                f"LossScaler.update: new_scale={value!r} is invalid. It must be a number within "
                f"[min_scale, max_scale] = [{self.min_scale:g}, {self.max_scale:g}]."
            )
        return to_fp32(value)

    def _count_outcome(self, found_inf: bool) -> None:
        """Count one iteration's outcome (telemetry only; the scale is not touched)."""
        self._steps += 1
        self._last_found_inf = found_inf
        if found_inf:
            self._skipped += 1
            self._consecutive_skips += 1
        else:
            self._consecutive_skips = 0
            self._skips_at_min = 0

    def _apply_outcome(self, found_inf: bool) -> None:
        """Apply one iteration's outcome to the counters and the scale (host arithmetic only)."""
        at_min = self._scale <= self.min_scale
        self._count_outcome(found_inf)
        if not self._enabled:
            return
        if not found_inf:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._hysteresis_left = self.hysteresis
                self._set_scale(min(self._scale * self.growth_factor, self.max_scale))
            return
        self._skips_at_min = self._skips_at_min + 1 if at_min else 0
        self._growth_tracker = 0
        self._hysteresis_left -= 1
        if self._hysteresis_left == 0:
            self._hysteresis_left = self.hysteresis
            self._set_scale(max(self._scale * self.backoff_factor, self.min_scale))
        limit = self.max_skips_at_min_scale
        if limit is not None and self._skips_at_min >= limit:
            raise NonFiniteTrainingError(
                f"loss scaling: {self._skips_at_min} consecutive steps had inf/NaN gradients at "
                f"the minimum loss scale ({self.min_scale:g}), so the model produces non-finite "
                "values whatever the scale. Try a lower learning rate, gradient clipping, or bf16 "
                "instead of fp16 (bf16 has fp32's range)."
            )

    def _set_scale(self, value: float) -> None:
        value = to_fp32(value)
        if value != self._scale:
            self._scale = value
            self._history.append((self._steps, value))

    # -- checkpointing ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume scaling exactly. Keys are plain Python numbers.

        ``scale``, ``growth_tracker``, ``hysteresis_left``, ``steps``, ``skipped_steps``,
        ``consecutive_skips``, ``skips_at_min_scale``, ``scale_history`` and the configuration
        (``growth_factor``, ``backoff_factor``, ``growth_interval``, ``min_scale``,
        ``max_scale``, ``hysteresis``). Empty when disabled, like ``GradScaler``.
        """
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_tracker": self._growth_tracker,
            "hysteresis_left": self._hysteresis_left,
            "steps": self._steps,
            "skipped_steps": self._skipped,
            "consecutive_skips": self._consecutive_skips,
            "skips_at_min_scale": self._skips_at_min,
            "scale_history": [list(item) for item in self._history],
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "min_scale": self.min_scale,
            "max_scale": self.max_scale,
            "hysteresis": self.hysteresis,
        }

    def load_state_dict(self, state: dict[str, Any]) -> str | None:
        """Restore from :meth:`state_dict`, or from a ``torch.amp.GradScaler.state_dict()``.
        Configuration in the dict overrides the constructor's.

        The state is checked as the constructor checks its arguments (a NaN, zero, negative
        or infinite scale, ``growth_factor <= 1``, ``backoff_factor >= 1``, ...), and its
        counters for consistency, before anything is changed.

        A GradScaler's state (``scale``, ``growth_factor``, ``backoff_factor``,
        ``growth_interval``, ``_growth_tracker``) migrates a run from GradScaler: the scale,
        its settings and the growth tracker carry over; this scaler's bounds and hysteresis
        stay as constructed, and the counters GradScaler does not keep (steps, skipped steps,
        the scale history) start at zero.

        Returns:
            For a GradScaler state, a note saying what carried over and what started at zero
            (also logged on the ``ampkit`` logger); else None.

        Raises:
            ScalerStateError: loading a non-empty state into a disabled scaler, or the reverse;
                or the state is not a dict, lacks keys, or holds a value out of range (the
                message names it).
        """
        if not isinstance(state, dict):
            raise ScalerStateError(
                f"load_state_dict: expected the dict of LossScaler.state_dict(), got a "
                f"{type(state).__name__}."
            )
        if not self._enabled:
            if state:
                raise ScalerStateError(
                    "load_state_dict: this scaler is disabled but the state comes from an enabled "
                    "(fp16) scaler. Resume with the precision the checkpoint was trained in."
                )
            return None
        if not state:
            raise ScalerStateError(
                "load_state_dict: the state is empty (saved from a disabled scaler, i.e. bf16 or "
                "fp32 training) but this scaler is enabled. Resume with the checkpoint's precision."
            )
        if set(state) == GRADSCALER_KEYS:
            return self._load_gradscaler_state(state)
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise ScalerStateError(
                f"load_state_dict: the state lacks {', '.join(missing)}. It is damaged or was "
                "not saved by LossScaler.state_dict(); nothing was loaded."
            )
        problem = state_problem(state)
        if problem:
            name, value, allowed = problem
            raise ScalerStateError(
                f"load_state_dict: {name}={value!r} is invalid; {name} must be {allowed}. The "
                "state is damaged or was not saved by LossScaler.state_dict(); nothing was loaded."
            )
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self.min_scale = float(state["min_scale"])
        self.max_scale = float(state["max_scale"])
        self.hysteresis = int(state["hysteresis"])
        self._scale = float(state["scale"])
        self._growth_tracker = int(state["growth_tracker"])
        self._hysteresis_left = int(state["hysteresis_left"])
        self._steps = int(state["steps"])
        self._skipped = int(state["skipped_steps"])
        self._consecutive_skips = int(state["consecutive_skips"])
        self._skips_at_min = int(state["skips_at_min_scale"])
        self._history.clear()
        self._history.extend((int(s), float(v)) for s, v in state["scale_history"])
        self._per_optimizer.clear()
        return None

    def _load_gradscaler_state(self, state: dict[str, Any]) -> str:
        """Take over a ``torch.amp.GradScaler`` state (see :meth:`load_state_dict`)."""
        scale, tracker = state["scale"], state["_growth_tracker"]
        if isinstance(scale, torch.Tensor) and scale.numel() == 1:
            scale = scale.item()
        if isinstance(tracker, torch.Tensor) and tracker.numel() == 1:
            tracker = int(tracker.item())
        problem = settings_problem(
            growth_factor=state["growth_factor"],
            backoff_factor=state["backoff_factor"],
            growth_interval=state["growth_interval"],
            hysteresis=self.hysteresis,
            min_scale=self.min_scale,
            max_scale=self.max_scale,
            scale=scale,
            scale_name="scale",
        )
        if problem is None and not is_int(tracker, 0, state["growth_interval"] - 1):
            problem = ("_growth_tracker", tracker, "an integer in [0, growth_interval)")
        if problem:
            name, value, allowed = problem
            raise ScalerStateError(
                f"load_state_dict: the GradScaler state's {name}={value!r} is invalid here; "
                f"{name} must be {allowed}. Construct the LossScaler with bounds that admit it "
                "(min_scale=, max_scale=) or fix the state; nothing was loaded."
            )
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self._scale = float(scale)
        self._growth_tracker = tracker
        self._hysteresis_left = self.hysteresis
        self._steps = self._skipped = self._consecutive_skips = self._skips_at_min = 0
        self._history.clear()
        self._history.append((0, self._scale))
        self._per_optimizer.clear()
        note = (
            f"LossScaler: took over a torch.amp.GradScaler state (scale {self._scale:g}, growth "
            f"tracker {tracker} of {self.growth_interval}); steps, skipped steps and the scale "
            "history start at zero, as GradScaler does not keep them."
        )
        logging.getLogger("ampkit").info(note)
        return note

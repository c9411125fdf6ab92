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
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ampkit._validate import is_int
from ampkit.errors import ConfigurationError, NonFiniteTrainingError, ScalerStateError
from ampkit.precision import devices
from ampkit.precision._kernels import unscale_and_check_
from ampkit.precision._scaler_rules import STATE_KEYS, settings_problem, state_problem
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


class LossScaler:
    """Dynamic loss scaler for fp16 training. See the module docstring for the call order.

    The first five arguments are ``torch.amp.GradScaler``'s, in its order, so
    ``LossScaler("cuda", init_scale=2.0**16)`` replaces ``GradScaler("cuda", init_scale=2.0**16)``
    and :meth:`load_state_dict` accepts a ``GradScaler.state_dict()``. With the default bounds
    the two compute bitwise the same weights and scales until the scale would leave
    ``[min_scale, max_scale]`` (GradScaler has no bounds) or ``max_skips_at_min_scale`` stops a
    run GradScaler would go on skipping.

    Args:
        device: the device the gradients live on (``"cuda"``, ``"cpu"``, ...), as GradScaler's
            first argument; recorded as :attr:`device`. The scale itself is a host number, so
            nothing is allocated on it.
        init_scale: the first scale. Must lie in ``[min_scale, max_scale]``.
        growth_factor: multiplier after ``growth_interval`` clean steps; must be > 1.
        backoff_factor: multiplier on overflow; must be in (0, 1).
        growth_interval: clean steps between growths; integer >= 1.
        enabled: when False, ``scale`` returns the loss unchanged, ``unscale_`` does nothing and
            ``step`` always steps; counters still count steps.
        min_scale: the scale never backs off below this (> 0).
        max_scale: the scale never grows above this.
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
        min_scale: float = 1.0,
        max_scale: float = 2.0**24,
        hysteresis: int = 1,
        max_skips_at_min_scale: int | None = 10,
        history_size: int = 1024,
        process_group: Any = None,
    ) -> None:
        problem = settings_problem(
            enabled=enabled,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            hysteresis=hysteresis,
            min_scale=min_scale,
            max_scale=max_scale,
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
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)
        self.hysteresis = hysteresis
        self.max_skips_at_min_scale = max_skips_at_min_scale
        self.process_group = process_group
        self._scale = float(init_scale)
        self._growth_tracker = 0
        self._hysteresis_left = hysteresis
        self._steps = 0
        self._skipped = 0
        self._consecutive_skips = 0
        self._skips_at_min = 0
        self._history: deque[tuple[int, float]] = deque([(0, self._scale)], maxlen=history_size)
        self._per_optimizer: dict[int, _OptRecord] = {}
        self._last_found_inf = False

    # -- queries -------------------------------------------------------------------------

    def is_enabled(self) -> bool:
        """Whether loss scaling is active."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled). A host value: no GPU sync."""
        return self._scale if self._enabled else 1.0

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

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """Return ``loss * scale`` (``loss`` itself when disabled), ready for ``backward()``."""
        if not self._enabled:
            return loss
        return loss * self._scale

    def _record_for(self, optimizer: torch.optim.Optimizer) -> _OptRecord:
        if id(optimizer) not in self._per_optimizer:  # its first step: say what it trains in
            check_dtype_contract(optimizer, caller="LossScaler")
        return self._per_optimizer.setdefault(id(optimizer), _OptRecord())

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place and record any inf/NaN.

        Call it (once) before clipping or inspecting gradients; ``step`` calls it otherwise.

        Raises:
            ScalerStateError: called twice, or after ``step()``, before ``update()``.
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
        params = (p for group in optimizer.param_groups for p in group["params"])
        record.found_inf = unscale_and_check_(params, 1.0 / self._scale)
        record.state = _OptState.UNSCALED

    def _found_inf(self, found: dict[torch.device, torch.Tensor]) -> bool:
        """Reduce the per-device flags to one decision, the same on every rank."""
        dist = torch.distributed
        distributed = (
            dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size(self.process_group) > 1
        )
        if not found:
            if not distributed:
                return False
            # This rank has no gradients but must still take part in the collective.
            device = devices.collective_device(dist.get_backend(self.process_group))
            found = {device: torch.zeros((), device=device)}
        first = next(iter(found.values()))
        total = torch.stack([flag.to(first.device) for flag in found.values()]).amax()
        if distributed:
            dist.all_reduce(total, op=dist.ReduceOp.MAX, group=self.process_group)
        return bool(total.item())  # the one GPU sync per step: the step must know to skip

    def step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> bool:
        """Unscale if not done yet, then call ``optimizer.step()`` unless a gradient is inf/NaN.

        Returns:
            True if the optimizer stepped, False if the step was skipped.

        Raises:
            ScalerStateError: ``step()`` called twice before ``update()``.
            ConfigurationError: a closure was passed while scaling (LBFGS-style optimizers
                re-evaluate the loss, which the scaler cannot see).
        """
        record = self._record_for(optimizer)
        if not self._enabled:
            optimizer.step() if closure is None else optimizer.step(closure)
            record.state = _OptState.STEPPED
            return True
        if closure is not None:
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
        if record.state is _OptState.READY:
            self.unscale_(optimizer)
        record.skipped = self._found_inf(record.found_inf or {})
        if not record.skipped:
            optimizer.step()
        record.state = _OptState.STEPPED
        return not record.skipped

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
        if len(optimizers) == 1:
            return self.step(optimizers[0])
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

    def update(self) -> None:
        """Adjust the scale from this iteration's overflow result, once per iteration.

        Raises:
            ScalerStateError: no ``step()`` since the last ``update()``.
            NonFiniteTrainingError: ``max_skips_at_min_scale`` consecutive steps were skipped at
                ``min_scale``: gradients are inf/NaN whatever the scale, so the model itself
                produces them.
        """
        stepped = [r for r in self._per_optimizer.values() if r.state is _OptState.STEPPED]
        if not stepped:
            raise ScalerStateError(
                "update() was called without a step() since the last update(). " + _CALL_ORDER
            )
        found_inf = any(r.skipped for r in stepped)
        self._per_optimizer.clear()
        self._apply_outcome(found_inf)

    def _apply_outcome(self, found_inf: bool) -> None:
        """Apply one iteration's outcome to the counters and the scale (host arithmetic only)."""
        self._steps += 1
        self._last_found_inf = found_inf
        if not self._enabled:
            return
        if not found_inf:
            self._consecutive_skips = 0
            self._skips_at_min = 0
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._hysteresis_left = self.hysteresis
                self._set_scale(min(self._scale * self.growth_factor, self.max_scale))
            return
        at_min = self._scale <= self.min_scale
        self._skipped += 1
        self._consecutive_skips += 1
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

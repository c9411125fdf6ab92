"""Lightning: ``AmpkitPrecision``, a precision plugin that runs ampkit's policy and loss scaler,
and ``AmpkitCallback``, which logs their telemetry through Lightning's loggers.

::

    from ampkit.integrations.lightning import AmpkitCallback, AmpkitPrecision

    precision = AmpkitPrecision("fp16", scaler=ampkit.LossScaler(min_scale=1.0))
    trainer = lightning.Trainer(plugins=[precision], callbacks=[AmpkitCallback()])
    trainer.fit(module)
    precision.stats                         # steps, skipped_steps, scale, scale_history

What the plugin does, against Lightning's own ``precision="16-mixed"``:

* the precision comes from :func:`ampkit.resolve_precision` (``"auto"`` picks from the hardware,
  with :attr:`AmpkitPrecision.policy` saying why); fp16 on a CPU is honoured (with a
  :class:`~ampkit.PrecisionWarning`: it is emulated and slow), where Lightning's ``16-mixed``
  runs bf16 instead;
* fp16 scales the loss with :class:`ampkit.LossScaler`: bounded scale, hysteresis, host-side
  counters (reading :attr:`~AmpkitPrecision.stats` never syncs the GPU), and
  :class:`~ampkit.NonFiniteTrainingError` once the scale has collapsed to its minimum and steps
  still overflow, instead of skipping forever;
* ``bf16-true`` casts the model to bf16 (keeping embeddings, norms and the head in fp32) and
  wraps each optimizer in a :class:`~ampkit.CompensatedOptimizer` (Kahan-compensated updates);
* ``keep_fp32=[...]`` runs the named modules (or module types) in fp32 under autocast
  (:func:`ampkit.keep_fp32`);
* the optimizers' parameter dtypes are checked as :class:`ampkit.MixedPrecision` checks them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator, Sequence
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError
from ampkit.integrations import LOSS_SCALE, LOST_UPDATES, NONFINITE_STEP, SKIPPED_STEPS
from ampkit.integrations._deps import require
from ampkit.precision.scaler import LossScaler, ScalerStats

_pl = require("lightning.pytorch", feature="ampkit.integrations.lightning", extra="lightning")
_Precision: Any = _pl.plugins.precision.Precision
_Callback: Any = _pl.Callback

__all__ = ["AmpkitCallback", "AmpkitPrecision"]

#: Lightning's name for each ampkit precision (``trainer.precision``).
_LIGHTNING_NAMES = {
    "fp32": "32-true",
    "fp16": "16-mixed",
    "bf16": "bf16-mixed",
    "bf16-true": "bf16-true",
    "fp8": "bf16-mixed",
}
_SUPPORTED = ("fp32", "fp16", "bf16", "bf16-true")


class AmpkitPrecision(_Precision):
    """A Lightning precision plugin backed by :class:`ampkit.MixedPrecision`'s policy and scaler.

    Pass it as ``lightning.Trainer(plugins=[AmpkitPrecision(...)])`` (and no ``precision=``).

    Args:
        precision: ``"auto"``, ``"fp32"``, ``"fp16"``, ``"bf16"``, ``"bf16-true"`` or an alias
            :func:`ampkit.resolve_precision` knows.
        device: the training device; None decides from the model's device when Lightning
            hands it over (CUDA when available before that).
        scaler: the :class:`~ampkit.LossScaler` fp16 uses (bounds, growth, hysteresis, ...);
            None builds one with the default settings. Refused for other precisions.
        keep_fp32: module names (as ``model.named_modules()`` spells them) or types to run in
            fp32 under autocast (:func:`ampkit.keep_fp32`).
        update_compensation: bf16-true only: ``"kahan"`` (default), ``"stochastic"`` or
            ``"none"``.
        bf16_true_keep_fp32: bf16-true only: modules kept in fp32 weights (None: embeddings,
            norms and the final projection).
        bf16_true_state_precision: bf16-true only: the optimizer state of the bf16 parameters
            in ``"fp32"`` (default), ``"bf16-stochastic"``, ``"bf16-kahan"`` or ``"bf16"``.

    Attributes:
        mp: the :class:`~ampkit.MixedPrecision` holding the policy and the scaler.
        precision: Lightning's name of the precision (``"16-mixed"`` for fp16, ...).
        last_step_skipped: whether the last optimizer step was skipped (inf/NaN gradients).

    Raises:
        ConfigurationError: an unknown precision, fp8 (use ampkit's Trainer), or an option that
            does not apply to the precision.
        UnsupportedPrecisionError: the device cannot run the precision.
    """

    def __init__(
        self,
        precision: str = "auto",
        device: torch.device | str | None = None,
        *,
        scaler: LossScaler | None = None,
        keep_fp32: Sequence[str | type[nn.Module]] | None = None,
        update_compensation: str | None = None,
        bf16_true_keep_fp32: Sequence[str | type[nn.Module]] | None = None,
        bf16_true_state_precision: str | None = None,
    ) -> None:
        self._requested = precision
        self._options: dict[str, Any] = {
            "scaler": scaler,
            "update_compensation": update_compensation,
            "bf16_true_keep_fp32": bf16_true_keep_fp32,
            "bf16_true_state_precision": bf16_true_state_precision,
        }
        self.keep_fp32 = None if keep_fp32 is None else list(keep_fp32)
        self._islands: Any = None
        self._session = False
        self.mp = self._engine(device)
        self.last_step_skipped = False
        self._wants_lost_updates = False  # AmpkitCallback sets it on the steps it logs

    def _engine(self, device: torch.device | str | None) -> Any:
        from ampkit.precision.engine import MixedPrecision

        mp = MixedPrecision(self._requested, device, **self._options)
        if mp.policy.precision not in _SUPPORTED:
            raise ConfigurationError(
                f"AmpkitPrecision: precision {self._requested!r} ({mp.policy.precision}) is not "
                f"supported by the Lightning plugin; it supports {', '.join(_SUPPORTED)} and "
                "'auto'. Train fp8 with ampkit.Trainer or ampkit.MixedPrecision."
            )
        self.precision = _LIGHTNING_NAMES[mp.policy.precision]
        return mp

    # -- what the plugin reports -----------------------------------------------------------

    @property
    def policy(self) -> Any:
        """The :class:`~ampkit.Policy` in force (``.reason`` says why)."""
        return self.mp.policy

    @property
    def scaler(self) -> LossScaler:
        """The :class:`~ampkit.LossScaler` (disabled for every precision but fp16)."""
        return self.mp.scaler

    @property
    def stats(self) -> ScalerStats:
        """Loss-scale telemetry, as ``mp.stats``: steps, skipped steps, scale, history."""
        return self.mp.stats

    # -- the model and the optimizers ------------------------------------------------------

    def convert_module(self, module: nn.Module) -> nn.Module:
        """bf16-true: cast to bf16 (kept modules stay fp32); others: unchanged."""
        self.mp.prepare_model(module)
        if self.keep_fp32 and self._islands is None:
            from ampkit.precision.islands import keep_fp32

            self._islands = keep_fp32(module, self.keep_fp32)
        return module

    def connect(
        self, model: nn.Module, optimizers: list[Any], lr_schedulers: list[Any]
    ) -> tuple[nn.Module, list[Any], list[Any]]:
        """Follow the model's device, check the optimizers, wrap them for bf16-true."""
        from ampkit.precision.engine import validate_param_dtypes

        device = next((p.device for p in model.parameters()), None)
        if device is not None and device.type != self.mp.device.type:
            self.mp = self._engine(device)
        wrapped = []
        for optimizer in optimizers:
            validate_param_dtypes(optimizer, self.mp.policy)
            wrapped.append(self.mp.prepare_optimizer(optimizer))
        # LR schedulers keep the optimizer they were built on: a CompensatedOptimizer shares
        # its param_groups, so their learning rates reach the wrapper's steps.
        if not self._session:
            self.mp.__enter__()  # TF32 as the policy says, restored at teardown
            self._session = True
        return model, wrapped, lr_schedulers

    def teardown(self) -> None:
        """Restore the global torch settings and remove the fp32-island hooks."""
        if self._session:
            self.mp.close()
            self._session = False
        if self._islands is not None:
            self._islands.remove()
            self._islands = None

    # -- the step --------------------------------------------------------------------------

    @contextlib.contextmanager
    def forward_context(self) -> Generator[None, None, None]:
        """The policy's autocast region."""
        with self.mp.autocast():
            yield

    def pre_backward(self, tensor: torch.Tensor, module: Any) -> torch.Tensor:
        """Lightning's hooks see the loss; backward gets it times the loss scale (fp16)."""
        tensor = super().pre_backward(tensor, module)
        return self.mp.scaler.scale(tensor)

    def optimizer_step(
        self, optimizer: Any, model: Any, closure: Callable[[], Any], **kwargs: Any
    ) -> Any:
        """Closure (forward, backward) -> unscale -> hooks, clipping -> step unless inf/NaN ->
        scale update.

        Raises:
            ConfigurationError: keyword arguments for ``optimizer.step`` (the scaler takes
                none), or an LBFGS-style optimizer under fp16.
            NonFiniteTrainingError: the scaler's ``max_skips_at_min_scale`` consecutive skipped
                steps at the minimum scale.
        """
        if kwargs:
            raise ConfigurationError(
                f"AmpkitPrecision: optimizer.step got keyword arguments {sorted(kwargs)}; the "
                "loss scaler steps the optimizer without any. Drop them."
            )
        scaler = self.mp.scaler
        if isinstance(optimizer, torch.optim.LBFGS):
            if scaler.is_enabled():
                raise ConfigurationError(
                    "AmpkitPrecision: LBFGS re-evaluates the loss in its step, which the fp16 "
                    "loss scaler cannot see. Use bf16 or fp32 with LBFGS."
                )
            return super().optimizer_step(optimizer, model=model, closure=closure)
        result = closure()
        # automatic optimization skips backward when training_step returned None
        skip = result is None and getattr(model, "automatic_optimization", True)
        if not skip:
            scaler.unscale_(optimizer)
        self._after_closure(model, optimizer)  # on_before_optimizer_step, then clipping
        if skip:
            return result
        measure = getattr(optimizer, "measure_next_step", None)
        if callable(measure) and self._wants_lost_updates:
            measure()
        stepped = scaler.step(optimizer)
        scaler.update()
        self.last_step_skipped = not stepped
        return result

    # -- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The loss scaler's state (empty unless fp16)."""
        return self.mp.scaler.state_dict() if self.mp.scaler.is_enabled() else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the loss scaler (a ``torch.amp.GradScaler`` state is accepted too)."""
        if state_dict:
            self.mp.scaler.load_state_dict(state_dict)


class AmpkitCallback(_Callback):
    """Log ampkit's telemetry through the Lightning module's loggers.

    Every ``log_every_n_steps`` (Lightning's logging rule): ``ampkit/skipped_steps``,
    ``ampkit/loss_scale`` (fp16), ``ampkit/lost_updates`` (bf16-true), and
    ``ampkit/nonfinite_step`` once a loss was inf/NaN. With :class:`AmpkitPrecision` the
    values come from its :class:`~ampkit.LossScaler` (host counters, no device sync); with
    Lightning's own ``16-mixed`` the skipped steps are counted on the device from
    ``GradScaler``'s scale (a step was skipped when the scale went down) and read at the log
    step.

    Args:
        trace_nonfinite: keep :func:`ampkit.detect_nonfinite` on the model during training (one
            ``aminmax`` per distinct tensor, queued without a sync; read only once a loss is
            inf/NaN) and name the module behind the first inf/NaN in :attr:`first`.

    Attributes:
        skipped_steps: optimizer steps skipped so far.
        first: the :class:`~ampkit.NumericsFinding` of the first inf/NaN, or None.
        nonfinite_step: the optimizer step (1-based) whose loss was first inf/NaN, or None.
        lost_updates: the last measured lost-updates share (bf16-true), or None.
    """

    def __init__(self, *, trace_nonfinite: bool = False) -> None:
        if not isinstance(trace_nonfinite, bool):
            raise ConfigurationError(
                f"AmpkitCallback: trace_nonfinite={trace_nonfinite!r} is invalid. Use True or "
                "False."
            )
        self.trace_nonfinite = trace_nonfinite
        self.skipped_steps = 0
        self.first: Any = None
        self.nonfinite_step: int | None = None
        self.lost_updates: float | None = None
        self._probe: Any = None
        self._first_bad: torch.Tensor | None = None
        self._device_skips: torch.Tensor | None = None
        self._last_scale: torch.Tensor | None = None
        self._resumed_scale: float | None = None

    # -- the state in Lightning's checkpoints ----------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Saved by Lightning in each checkpoint: the skipped steps, the first inf/NaN (its
        step and finding) and the last loss scale seen (Lightning's own ``GradScaler``)."""
        skipped = self.skipped_steps
        if self._device_skips is not None:
            skipped = int(self._device_skips)  # a checkpoint's one read
        return {
            "skipped_steps": skipped,
            "nonfinite_step": self.nonfinite_step,
            "first": None if self.first is None else self.first.to_dict(),
            "last_scale": None if self._last_scale is None else float(self._last_scale),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` when Lightning resumes (``fit(ckpt_path=...)``), so the
        counts continue and the first inf/NaN stays the earlier run's."""
        from ampkit.doctor.rows import NumericsFinding

        self.skipped_steps = int(state_dict.get("skipped_steps", 0))
        self.nonfinite_step = state_dict.get("nonfinite_step")
        first = state_dict.get("first")
        if isinstance(first, dict):
            first = dict(first)
            first["input_ranges"] = tuple(tuple(r) for r in first.get("input_ranges") or ())
            numbers = first.get("numbers") or {}
            first["numbers"] = {k: math.nan if v is None else v for k, v in numbers.items()}
            self.first = NumericsFinding(**first)
        scale = state_dict.get("last_scale")
        self._resumed_scale = float(scale) if isinstance(scale, (int, float)) else None

    # -- the run ---------------------------------------------------------------------------

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.trace_nonfinite and self._probe is None:
            from ampkit.doctor import detect_nonfinite

            self._probe = detect_nonfinite(pl_module).start()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close()

    def _close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            if self.first is None and self.nonfinite_step is not None:
                self.first = self._probe.first
            self._probe = None

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        if self.nonfinite_step is not None:
            return
        # all on the device, the step a Python scalar (a kernel argument, not a copy): no sync
        bad = ~torch.isfinite(loss.detach()).all()
        if self._first_bad is None:
            self._first_bad = torch.full((), -1, dtype=torch.int64, device=loss.device)
        first_bad = self._first_bad
        self._first_bad = torch.where(bad & (first_bad < 0), trainer.global_step + 1, first_bad)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        plugin = trainer.precision_plugin
        if isinstance(plugin, AmpkitPrecision):
            plugin._wants_lost_updates = _logs_this_step(trainer)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        plugin = trainer.precision_plugin
        ours = isinstance(plugin, AmpkitPrecision)
        if not ours:
            self._count_gradscaler_skips(getattr(plugin, "scaler", None))
        if not _logs_this_step(trainer):
            return
        values: dict[str, float] = {}
        if ours:
            stats = plugin.stats
            self.skipped_steps = stats.skipped_steps
            if plugin.scaler.is_enabled():
                values[LOSS_SCALE] = stats.scale
            self._read_lost_updates(trainer)
        elif self._device_skips is not None and self._last_scale is not None:
            self.skipped_steps = int(self._device_skips)  # one read per log step
            values[LOSS_SCALE] = float(self._last_scale)
        if self._first_bad is not None and self.nonfinite_step is None:
            first_bad = int(self._first_bad)
            if first_bad > 0:
                self.nonfinite_step = first_bad
                if self._probe is not None:
                    self.first = self._probe.first
        values[SKIPPED_STEPS] = float(self.skipped_steps)
        if self.lost_updates is not None:
            values[LOST_UPDATES] = self.lost_updates
        if self.nonfinite_step is not None:
            values[NONFINITE_STEP] = float(self.nonfinite_step)
        pl_module.log_dict(values, on_step=True, on_epoch=False, logger=True, prog_bar=False)

    # -- helpers ---------------------------------------------------------------------------

    def _read_lost_updates(self, trainer: Any) -> None:
        for optimizer in trainer.optimizers:
            reader = getattr(optimizer, "lost_updates", None)
            if callable(reader):
                result = reader()
                if result is not None:
                    self.lost_updates = result.fraction
                    optimizer.last_lost = []

    def _count_gradscaler_skips(self, scaler: Any) -> None:
        """Lightning's own GradScaler: a skipped step backs its scale off (kept on the device)."""
        scale = getattr(scaler, "_scale", None)
        if not isinstance(scale, torch.Tensor):
            return
        if self._last_scale is None or self._device_skips is None:
            init = self._resumed_scale or float(getattr(scaler, "_init_scale", 2.0**16))
            self._last_scale = torch.full((), init, device=scale.device)
            self._device_skips = torch.full(
                (), self.skipped_steps, dtype=torch.int64, device=scale.device
            )
        self._device_skips += (scale < self._last_scale).to(torch.int64)
        self._last_scale = scale.detach().clone()


def _logs_this_step(trainer: Any) -> bool:
    """Whether Lightning sends this step's metrics to its loggers (its own rule; before the
    step or right after it, within ``on_train_batch_end``)."""
    try:
        if (
            trainer.fit_loop._should_accumulate()
            and trainer.lightning_module.automatic_optimization
        ):
            return False
        return bool(trainer._logger_connector.should_update_logs)
    except AttributeError:  # another Lightning version: log (and read) every step
        return True

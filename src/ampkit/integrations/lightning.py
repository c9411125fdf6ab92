"""Lightning: ``AmpkitPrecision``, a precision plugin that runs ampkit's policy and loss scaler,
``AmpkitCallback``, which logs their telemetry through Lightning's loggers, and
``AmpkitFabricPrecision``, Fabric's mixed precision with ampkit's policy and loss scaler.

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
import warnings
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.integrations import LOSS_SCALE, LOST_UPDATES, NONFINITE_STEP, SKIPPED_STEPS
from ampkit.integrations._deps import require
from ampkit.precision.scaler import LossScaler, ScalerStats

if TYPE_CHECKING:
    from ampkit.precision.modes import PrecisionMode

_pl = require("lightning.pytorch", feature="ampkit.integrations.lightning", extra="lightning")
_Precision: Any = _pl.plugins.precision.Precision
_Callback: Any = _pl.Callback

__all__ = ["AmpkitCallback", "AmpkitFabricPrecision", "AmpkitPrecision"]

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
            :func:`ampkit.resolve_precision` knows, or a mode object holding its options
            (``ampkit.Bf16True(...)``).
        device: the training device; None decides from the model's device when Lightning
            hands it over (CUDA when available before that).
        scaler: the :class:`~ampkit.LossScaler` fp16 uses (bounds, growth, hysteresis, ...);
            None builds one with the default settings. Refused for other precisions.
        keep_fp32: module names (as ``model.named_modules()`` spells them) or types to run in
            fp32 under autocast (:func:`ampkit.keep_fp32`).
        **old_options: the per-mode keywords this plugin took before a mode object held its
            options: they keep working for one release with a ``DeprecationWarning`` that
            shows the mode object to pass instead.

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
        precision: str | PrecisionMode = "auto",
        device: torch.device | str | None = None,
        *,
        scaler: LossScaler | None = None,
        keep_fp32: Sequence[str | type[nn.Module]] | None = None,
        **old_options: Any,
    ) -> None:
        from ampkit.precision.modes._deprecated import translate_old_keywords

        known = ("precision", "device", "scaler", "keep_fp32")
        self._requested = precision
        self._mode_options = translate_old_keywords("AmpkitPrecision", old_options, known)
        self._scaler = scaler
        self.keep_fp32 = None if keep_fp32 is None else list(keep_fp32)
        self._islands: Any = None
        self._session = False
        self.mp = self._engine(device)
        self.last_step_skipped = False
        self._wants_lost_updates = False  # AmpkitCallback sets it on the steps it logs

    def _engine(self, device: torch.device | str | None) -> Any:
        import copy

        from ampkit.precision.engine import MixedPrecision
        from ampkit.precision.modes import PrecisionMode, precision_mode
        from ampkit.precision.policy import resolve_precision

        requested = self._requested
        if isinstance(requested, PrecisionMode):
            requested = copy.deepcopy(requested)  # bound to this engine's device only
        elif self._mode_options:
            requested = precision_mode(resolve_precision(requested, device), **self._mode_options)
        mp = MixedPrecision(requested, device, scaler=self._scaler)
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
        """The :class:`~ampkit.LossScaler` (disabled for every precision but fp16).

        Settable, as Lightning's own plugins' ``scaler`` is: to another ``LossScaler`` (enabled
        exactly when the precision is fp16), or to a wrapper around one
        (``unittest.mock.Mock(wraps=plugin.scaler)``, to count its calls).

        Raises:
            ConfigurationError: on assignment, a ``torch.amp.GradScaler`` (wrap it in nothing:
                pass ``scaler=ampkit.LossScaler(...)`` instead; ``load_state_dict`` takes a
                GradScaler's state), or a ``LossScaler`` enabled under another precision.
        """
        return self.mp.scaler

    @scaler.setter
    def scaler(self, value: Any) -> None:
        fp16 = self.mp.policy.uses_scaler
        if isinstance(value, LossScaler):
            if value.is_enabled() != fp16:
                raise ConfigurationError(
                    f"AmpkitPrecision.scaler: got a LossScaler with enabled={value.is_enabled()} "
                    f"under {self.mp.policy.precision}; only fp16 scales the loss. Pass "
                    f"LossScaler(enabled={fp16})."
                )
        elif isinstance(value, torch.amp.GradScaler) or not all(
            callable(getattr(value, name, None))
            for name in ("scale", "unscale_", "step", "update", "state_dict")
        ):
            raise ConfigurationError(
                f"AmpkitPrecision.scaler: got a {type(value).__name__}; the plugin steps with an "
                "ampkit.LossScaler (or a wrapper around one). Assign ampkit.LossScaler(...); "
                "a GradScaler's state_dict() loads into it."
            )
        self.mp.scaler = value

    @property
    def stats(self) -> ScalerStats:
        """Loss-scale telemetry, as ``mp.stats``: steps, skipped steps, scale, history."""
        return self.mp.stats

    # -- the model and the optimizers ------------------------------------------------------

    def convert_module(self, module: nn.Module) -> nn.Module:
        """bf16-true: cast to bf16 (kept modules stay, or become, fp32); others: unchanged.

        Warns:
            PrecisionWarning: bf16-true left no parameter in bf16 (every module is one the
                mode keeps in fp32, e.g. a model whose only Linear is its head).
        """
        self.mp.prepare_model(module)
        if self.mp.policy.precision == "bf16-true":
            _warn_if_no_bf16(module)
        if self.keep_fp32 and self._islands is None:
            from ampkit.precision.fp32_modules import keep_fp32

            self._islands = keep_fp32(module, self.keep_fp32)
        return module

    def tensor_init_context(self) -> contextlib.AbstractContextManager[None]:
        """bf16-true: tensors made inside are bf16 (the default dtype is bf16 there), so a
        model built in ``configure_model`` is never held in fp32 first; the modules the mode
        keeps in fp32 are cast up by :meth:`convert_module`, from their bf16-rounded initial
        values. Other precisions: no change."""
        if self.mp.policy.precision != "bf16-true":
            return contextlib.nullcontext()
        return _default_dtype(torch.bfloat16)

    def module_init_context(self) -> contextlib.AbstractContextManager[None]:
        """As :meth:`tensor_init_context` (Lightning enters it around ``configure_model``)."""
        return self.tensor_init_context()

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
            self.mp.check_contract(wrapped[-1], model)  # what it trains in: self.contract
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

    @property
    def contract(self) -> Any:
        """The :class:`~ampkit.precision.contract.DtypeContract` of the last optimizer
        connected (None before Lightning connects them)."""
        return self.mp.contract

    # -- the step --------------------------------------------------------------------------

    @contextlib.contextmanager
    def forward_context(self) -> Generator[None, None, None]:
        """The policy's autocast region."""
        with self.mp.autocast():
            yield

    def autocast_context_manager(self) -> contextlib.AbstractContextManager[Any]:
        """The policy's autocast region, under the name of Lightning's
        ``MixedPrecision.autocast_context_manager`` (for code that enters it directly)."""
        return cast(contextlib.AbstractContextManager[Any], self.mp.autocast())

    def pre_backward(self, tensor: torch.Tensor, module: Any) -> torch.Tensor:
        """Lightning's hooks see the loss; backward gets it times the loss scale (fp16).

        Raises:
            ConfigurationError: not under a Lightning ``Trainer`` (``Fabric`` passes no
                LightningModule): use :class:`AmpkitFabricPrecision` with Fabric.
        """
        if not isinstance(module, _pl.LightningModule):
            raise ConfigurationError(
                "AmpkitPrecision is the Lightning Trainer's plugin; Fabric called it with "
                f"{type(module).__name__ if module is not None else 'no LightningModule'}. Use "
                "Fabric(plugins=[ampkit.integrations.lightning.AmpkitFabricPrecision(...)])."
            )
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
        scaler.step(optimizer)
        scaler.update()
        self.last_step_skipped = scaler.last_step_skipped is True
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
        strict: raise instead of warning when the dtype contract finds a silent pure-bf16
            set-up (bf16 weights under a plain optimizer and Lightning's ``bf16-mixed``).

    Attributes:
        skipped_steps: optimizer steps skipped so far.
        first: the :class:`~ampkit.NumericsFinding` of the first inf/NaN, or None.
        nonfinite_step: the optimizer step (1-based) whose loss was first inf/NaN, or None.
        lost_updates: the last measured lost-updates share (bf16-true), or None.
        contracts: the :class:`~ampkit.precision.contract.DtypeContract` of each optimizer,
            read when training starts; the loggers get the first one's fields as
            hyperparameters (``ampkit/contract``, ``ampkit/weights``, ``ampkit/master``,
            ``ampkit/optimizer_state``).

    Warns:
        PrecisionWarning: when training starts, once, when the model trains in pure bf16
            nobody asked for (bf16 weights, a plain optimizer, ``bf16-mixed``), with the fix.
    """

    def __init__(self, *, trace_nonfinite: bool = False, strict: bool = False) -> None:
        for name, value in [("trace_nonfinite", trace_nonfinite), ("strict", strict)]:
            if not isinstance(value, bool):
                raise ConfigurationError(
                    f"AmpkitCallback: {name}={value!r} is invalid. Use True or False."
                )
        self.trace_nonfinite = trace_nonfinite
        self.strict = strict
        self.contracts: list[Any] = []
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
        if not self.contracts:
            self._read_contracts(trainer, pl_module)
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

    def _read_contracts(self, trainer: Any, pl_module: Any) -> None:
        """The dtype contract of each optimizer (warns once, or raises with ``strict``), its
        fields sent to the loggers as hyperparameters."""
        from ampkit.precision.contract import check_dtype_contract, summary_fields

        plugin = trainer.precision_plugin
        name = str(getattr(plugin, "precision", "32-true"))
        autocast = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(name)
        for optimizer in trainer.optimizers:
            self.contracts.append(
                check_dtype_contract(
                    optimizer,
                    model=pl_module,
                    autocast=autocast,
                    caller=f"AmpkitCallback (Lightning precision {name!r})",
                    strict=self.strict,
                    intended_pure_bf16=name == "bf16-true",  # asked for by name
                )
            )
        if self.contracts:
            for logger in trainer.loggers:
                logger.log_hyperparams(dict(summary_fields(self.contracts[0])))

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


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Generator[None, None, None]:
    """``torch.set_default_dtype(dtype)`` inside, the previous default restored on exit."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _warn_if_no_bf16(module: nn.Module) -> None:
    """One line when bf16-true's conversion left no parameter in bf16."""
    params = [p for p in module.parameters() if p.is_floating_point()]
    if params and not any(p.dtype == torch.bfloat16 for p in params):
        warnings.warn(
            f"AmpkitPrecision('bf16-true'): no parameter of the {type(module).__name__} is bf16 "
            "after conversion: every module is one bf16-true keeps in fp32 (embeddings, norms, "
            "the final projection), so this trains as fp32. Pass bf16_true_keep_fp32=[] (or "
            "the names to keep) to cast the rest, or use 'bf16' (mixed).",
            PrecisionWarning,
            stacklevel=3,
        )


_fabric_amp = require(
    "lightning.fabric.plugins.precision.amp", feature="AmpkitFabricPrecision", extra="lightning"
)


class AmpkitFabricPrecision(_fabric_amp.MixedPrecision):  # type: ignore[misc,name-defined]
    """A Fabric precision plugin: Fabric's own mixed precision, with ampkit's policy and loss
    scaler. ``Fabric(plugins=[AmpkitFabricPrecision("fp16")])``.

    It is Fabric's ``MixedPrecision`` (autocast, input casting, ``backward``, ``optimizer_step``,
    ``unscale_gradients`` for clipping, state) with :class:`ampkit.LossScaler` as its scaler —
    GradScaler's API, so Fabric's code drives it unchanged — which adds bounds, hysteresis,
    host-side counters (:attr:`stats`) and the stop after ``max_skips_at_min_scale``. With an
    unbounded scaler the weights are bitwise those of Fabric's ``16-mixed`` with a GradScaler;
    in bf16, those of ``bf16-mixed``. Unlike Fabric's ``16-mixed``, fp16 on a CPU runs fp16
    (with a :class:`~ampkit.PrecisionWarning`), not bf16.

    Args:
        precision: ``"auto"``, ``"fp16"``, ``"bf16"`` or an alias :func:`ampkit.resolve_precision`
            knows (it must resolve to fp16 or bf16).
        device: the device autocast runs on; None: CUDA when available, else CPU.
        scaler: the :class:`~ampkit.LossScaler` for fp16; None builds one with the defaults.

    Raises:
        ConfigurationError: the precision resolves to something else than fp16 or bf16, or a
            scaler given for bf16.
        UnsupportedPrecisionError: the device cannot run the precision.
    """

    def __init__(
        self,
        precision: str = "auto",
        device: torch.device | str | None = None,
        *,
        scaler: LossScaler | None = None,
    ) -> None:
        from ampkit.precision.policy import resolve_precision

        policy = resolve_precision(precision, device)
        if policy.precision not in ("fp16", "bf16"):
            raise ConfigurationError(
                f"AmpkitFabricPrecision: precision {precision!r} resolves to {policy.precision}; "
                "this plugin runs fp16 or bf16 mixed precision. For fp32 pass no precision "
                "plugin to Fabric."
            )
        fp16 = policy.uses_scaler
        if scaler is not None and (not fp16 or not isinstance(scaler, LossScaler)):
            raise ConfigurationError(
                f"AmpkitFabricPrecision: scaler={type(scaler).__name__} with "
                f"{policy.precision}; only fp16 takes a scaler, an ampkit.LossScaler."
            )
        if fp16 and scaler is None:
            scaler = LossScaler(policy.device.type)
        super().__init__("16-mixed" if fp16 else "bf16-mixed", policy.device.type, scaler)
        #: The :class:`~ampkit.Policy` in force (``.reason`` says why).
        self.policy = policy

    @property
    def stats(self) -> ScalerStats:
        """Loss-scale telemetry (zero counters and scale 1.0 under bf16)."""
        scaler = self.scaler if self.scaler is not None else LossScaler(enabled=False)
        return scaler.stats

"""``AmpkitCallback``: ampkit's mixed-precision telemetry inside the Hugging Face ``Trainer``.

::

    from ampkit.integrations.transformers import AmpkitCallback

    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    ampkit_cb = AmpkitCallback.attach(trainer)   # first in line: every report_to backend sees it
    trainer.train()
    ampkit_cb.first                              # the module behind the first inf/NaN, or None

Each training log line (``trainer.state.log_history`` and every ``report_to`` backend) gains:

* ``ampkit/skipped_steps``: optimizer steps skipped so far because a gradient was inf/NaN
  (fp16: read from Accelerate's optimizer, which already knows; no device sync);
* ``ampkit/loss_scale``: fp16 only, the loss scale of Accelerate's ``GradScaler``, read at the
  log line, right after the Trainer's own ``loss.item()`` (so nothing is left to wait for);
* ``ampkit/lost_updates``: models with fp16/bf16 weights only: the share of the logged step's
  weight elements with a non-zero gradient whose stored value did not change (the update was
  rounded away);
* ``ampkit/nonfinite_step``: the step of the first inf/NaN loss, once there was one; the log
  history also gets ``ampkit/nonfinite_module``, its module name (text, which scalar backends
  such as TensorBoard and MLflow cannot take).

The first inf/NaN loss is traced without a cost on healthy steps: the callback keeps a
reference to each micro-batch's inputs and loss, and checks the loss for inf/NaN after each
micro-batch: one host read, right after the Trainer's own read of the same loss for
``logging_nan_inf_filter`` (on by default), so it waits at most for the kernels queued in
between (gradient clipping). At the first inf/NaN loss, before the optimizer step changes any weight,
it runs that micro-batch once more under :func:`ampkit.detect_nonfinite` (forward, and backward
with ``torch.autograd.grad`` so no ``.grad`` and no DDP hook is touched, with the autocast and
loss scale of the real step and the random state restored afterwards), names the module that
made the first inf/NaN and logs it.

Across ``trainer.train(resume_from_checkpoint=...)`` the callback's counters carry over: at each
save it writes :data:`STATE_FILE` (the skipped steps, the first inf/NaN step and its finding)
into the checkpoint folder, and a resumed run reads it back from the checkpoint it resumes
(``output_dir/checkpoint-<step>``), so ``ampkit/skipped_steps`` keeps counting and the first
inf/NaN stays the one of the earlier run.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.integrations import (
    DOCTOR_PRECISION,
    LOSS_SCALE,
    LOST_UPDATES,
    NONFINITE_MODULE,
    NONFINITE_STEP,
    SKIPPED_STEPS,
)
from ampkit.integrations._deps import require

_transformers = require("transformers", feature="ampkit.integrations.transformers", extra="hf")
_TrainerCallback: Any = _transformers.TrainerCallback

__all__ = ["STATE_FILE", "AmpkitCallback"]

#: The file the callback's state is saved in, in each Hugging Face checkpoint folder.
STATE_FILE = "ampkit_callback.json"

log = logging.getLogger("ampkit")

_LOW = (torch.float16, torch.bfloat16)


def loss_of(output: Any) -> torch.Tensor | None:
    """The scalar loss a Hugging Face model returned (``.loss`` or ``["loss"]``), or None."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss
    return None


class AmpkitCallback(_TrainerCallback):
    """Log ampkit's telemetry into the ``Trainer``'s log lines and trace the first inf/NaN.

    Add it with :meth:`attach` (it then runs before the ``report_to`` callbacks, which log the
    line it completes); passed in ``callbacks=[...]`` it runs after them, so only the log
    history and the callbacks after it see its keys.

    Args:
        trace_nonfinite: at the first inf/NaN loss, replay that micro-batch under
            :func:`ampkit.detect_nonfinite` and name the module that made it.
        lost_updates: measure ``ampkit/lost_updates`` on logged steps when trainable weights
            are fp16/bf16 (one copy of those weights, on those steps only).
        doctor_on_start: run :func:`ampkit.diagnose` on the first micro-batch (one fp32 step
            with every module observed, weights and gradients left as they were) and log its
            recommendation: ``ampkit/doctor_precision`` in the log history, and the report
            in :attr:`report`.
        strict: raise instead of warning when the dtype contract finds a silent pure-bf16
            set-up (bf16 weights under a plain optimizer, no fp32 master).

    Raises:
        ConfigurationError: an argument is not a bool.

    Attributes:
        skipped_steps: optimizer steps skipped so far (inf/NaN gradients under fp16).
        first: the :class:`~ampkit.NumericsFinding` of the first inf/NaN, or None.
        nonfinite_step: the optimizer step (1-based) whose loss was first inf/NaN, or None.
        report: the :class:`~ampkit.NumericsReport` of ``doctor_on_start``, or None.
        lost_updates: the last measured lost-updates share, or None.
        autocast_dtype: the autocast dtype the model's first forward ran under (None: no
            autocast), as read inside the forward.
        contract: the :class:`~ampkit.precision.contract.DtypeContract` read when training
            began (weights, gradients, master copy, optimizer state, autocast); the first log
            line of the history carries it as ``ampkit/contract``, ``ampkit/weights``,
            ``ampkit/master`` and ``ampkit/optimizer_state``.

    Warns:
        PrecisionWarning: at the start of training, once, when the model trains in pure bf16
            nobody asked for (a model loaded in bf16, ``bf16=True`` and a plain AdamW), with
            the fix.
    """

    def __init__(
        self,
        *,
        trace_nonfinite: bool = True,
        lost_updates: bool = True,
        doctor_on_start: bool = False,
        strict: bool = False,
    ) -> None:
        for name, value in [
            ("trace_nonfinite", trace_nonfinite),
            ("lost_updates", lost_updates),
            ("doctor_on_start", doctor_on_start),
            ("strict", strict),
        ]:
            if not isinstance(value, bool):
                raise ConfigurationError(
                    f"AmpkitCallback: {name}={value!r} is invalid. Use True or False."
                )
        self.trace_nonfinite = trace_nonfinite
        self.measure_lost_updates = lost_updates
        self.doctor_on_start = doctor_on_start
        self.strict = strict
        self.contract: Any = None
        self._logged_contract = False
        self.skipped_steps = 0
        self.first: Any = None
        self.nonfinite_step: int | None = None
        self.report: Any = None
        self.lost_updates: float | None = None
        self.autocast_dtype: torch.dtype | None = None
        self._model: nn.Module | None = None
        self._handles: list[Any] = []
        self._inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._autocast: tuple[str, bool, torch.dtype] | None = None
        self._loss: torch.Tensor | None = None
        self._replaying = False
        self._traced = False
        self._probe_handles: list[Any] = []
        self._args: Any = None
        self._before: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._counts: tuple[torch.Tensor, torch.Tensor] | None = None
        self._logged_finding = False
        self._logged_doctor = False
        self._fallback_note: str | None = None  # said on the console at the first step

    # -- installation --------------------------------------------------------------------

    @classmethod
    def attach(cls, trainer: Any, **kwargs: Any) -> AmpkitCallback:
        """Build the callback and put it first in ``trainer``'s callbacks; return it.

        First in line, it completes each log line before the ``report_to`` callbacks
        (TensorBoard, MLflow, W&B, ...) send it.

        Args:
            trainer: a ``transformers.Trainer``.
            **kwargs: the callback's arguments.

        Raises:
            ConfigurationError: ``trainer`` is not a ``transformers.Trainer``, or an argument is
                not a bool.
        """
        callbacks = getattr(getattr(trainer, "callback_handler", None), "callbacks", None)
        if not isinstance(callbacks, list):
            raise ConfigurationError(
                f"AmpkitCallback.attach: trainer is a {type(trainer).__name__}, not a "
                "transformers.Trainer. Pass the Trainer, or add AmpkitCallback() to the "
                "callbacks of yours."
            )
        callback = cls(**kwargs)
        callbacks.insert(0, callback)
        return callback

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._args = args
        self._restore_from_checkpoint(args, state)
        model = kwargs.get("model")
        optimizer = kwargs.get("optimizer")
        if optimizer is not None and self.contract is None:
            self.contract = _contract(args, model, optimizer, self.strict)
        if isinstance(model, nn.Module) and self._model is None:
            self._model = model
            self._handles = [
                model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
                model.register_forward_hook(self._after_forward),
            ]
            # Accelerate enters autocast inside the model's (patched) forward, after the
            # model's own hooks: the first submodule call sees what the model really ran in.
            self._probe_handles = [
                m.register_forward_pre_hook(self._read_autocast)
                for m in model.modules()
                if m is not model
            ]

    def _read_autocast(self, module: nn.Module, args: Any) -> None:
        handles, self._probe_handles = self._probe_handles, []
        for handle in handles:
            handle.remove()
        if self._model is None:
            return
        kind = _device_of(self._model).type
        if torch.is_autocast_enabled(kind):
            self.autocast_dtype = torch.get_autocast_dtype(kind)
        wanted = torch.float16 if self._args.fp16 else torch.bfloat16 if self._args.bf16 else None
        weights = {p.dtype for p in self._model.parameters() if p.is_floating_point()}
        if wanted is not None and self.autocast_dtype != wanted and weights != {wanted}:
            ran = "fp32" if self.autocast_dtype is None else str(self.autocast_dtype)[6:]
            asked = "fp16=True" if self._args.fp16 else "bf16=True"
            note = (
                f"AmpkitCallback: the Trainer was asked for {asked}, but the model's forward "
                f"runs under {ran} autocast on {kind} (the Trainer/Accelerate fell back "
                "without saying so). Use a device that runs the precision, or ask for what "
                "runs here."
            )
            warnings.warn(note, PrecisionWarning, stacklevel=2)
            self._fallback_note = note

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    # -- the state in the Trainer's checkpoints ------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state a resumed run continues from: the skipped steps and the first inf/NaN
        (its step and finding), as JSON-ready values."""
        return {
            "skipped_steps": self.skipped_steps,
            "nonfinite_step": self.nonfinite_step,
            "first": None if self.first is None else self.first.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (an earlier run's counters and first inf/NaN).

        Raises:
            ConfigurationError: ``state`` is not such a dict (the message names the field).
        """
        from ampkit._validate import is_int
        from ampkit.doctor.rows import NumericsFinding

        problems = []
        if not isinstance(state, dict):
            problems.append(f"a {type(state).__name__}, not a dict")
        else:
            if not is_int(state.get("skipped_steps"), 0):
                problems.append(f"skipped_steps={state.get('skipped_steps')!r}")
            step = state.get("nonfinite_step")
            if step is not None and not is_int(step, 1):
                problems.append(f"nonfinite_step={step!r}")
            first = state.get("first")
            if first is not None and not isinstance(first, dict):
                problems.append(f"first={first!r}")
        if problems:
            raise ConfigurationError(
                f"AmpkitCallback.load_state_dict: {'; '.join(problems)} is invalid. Pass what "
                "state_dict() returned."
            )
        first = state["first"]
        if first is not None:
            first = dict(first)
            first["input_ranges"] = tuple(tuple(r) for r in first.get("input_ranges") or ())
            first["numbers"] = {
                k: math.nan if v is None else v for k, v in first.get("numbers", {}).items()
            }
            first = NumericsFinding(**first)
        self.skipped_steps = state["skipped_steps"]
        self.nonfinite_step = state.get("nonfinite_step")
        self.first = first
        # a step already traced is not traced again, and its module was logged then
        self._traced = self._logged_finding = self.nonfinite_step is not None

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not getattr(state, "is_world_process_zero", True):
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            from ampkit._files import write_json

            write_json(folder / STATE_FILE, self.state_dict())

    def _restore_from_checkpoint(self, args: Any, state: Any) -> None:
        """Read :data:`STATE_FILE` of the checkpoint this run resumes, if it resumes one."""
        if not state.global_step:
            return
        file = Path(args.output_dir) / f"checkpoint-{state.global_step}" / STATE_FILE
        if not file.is_file():
            warnings.warn(
                f"AmpkitCallback: this run resumes at step {state.global_step}, but {file} is "
                "missing (a checkpoint outside output_dir, or saved without the callback), so "
                "ampkit/skipped_steps and the first inf/NaN start afresh.",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        import json

        from ampkit._files import read_regular

        try:
            self.load_state_dict(json.loads(read_regular(file, 1 << 20)))
        except (OSError, ValueError) as exc:  # ConfigurationError is a ValueError
            warnings.warn(
                f"AmpkitCallback: {file} could not be read ({exc}); ampkit/skipped_steps and "
                "the first inf/NaN start afresh.",
                RuntimeWarning,
                stacklevel=3,
            )

    def close(self) -> None:
        """Remove the hooks and drop the references to the last batch (idempotent)."""
        for handle in [*self._handles, *self._probe_handles]:
            handle.remove()
        self._handles, self._probe_handles = [], []
        self._model = None
        self._inputs = self._loss = None
        self._before = []

    # -- the model's forward -------------------------------------------------------------

    def _before_forward(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if self._replaying or not module.training:
            return
        self._inputs = (args, kwargs)
        device = _device_of(module)
        enabled = torch.is_autocast_enabled(device.type)
        self._autocast = (device.type, enabled, torch.get_autocast_dtype(device.type))

    def _after_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        if not self._replaying and module.training:
            loss = loss_of(output)
            self._loss = None if loss is None else loss.detach()

    # -- the Trainer's events ------------------------------------------------------------

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # A Python warning is shown once per place and may be filtered away; the fallback is
        # also said on the console (the ampkit logger) when the first step ends.
        if self._fallback_note is not None:
            note, self._fallback_note = self._fallback_note, None
            log.warning("step %d: %s", state.global_step, note)

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._check_loss(state, kwargs.get("optimizer"))

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        optimizer = kwargs.get("optimizer")
        self._check_loss(state, optimizer)
        if self.doctor_on_start and self.report is None and self._inputs is not None:
            self._diagnose(args)
        self._before = []
        if self.measure_lost_updates and self._logs_next(args, state) and self._model is not None:
            self._before = [
                (p, p.detach().clone())
                for p in self._model.parameters()
                if p.requires_grad and p.dtype in _LOW and p.grad is not None
            ]

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        optimizer = kwargs.get("optimizer")
        skipped = bool(getattr(optimizer, "step_was_skipped", False))
        self.skipped_steps += skipped
        if self._before and not skipped:
            from ampkit.precision.bf16_true.lost_updates import lost_update_counts

            lost = wanted = torch.zeros((), dtype=torch.int64, device=self._before[0][1].device)
            for param, before in self._before:
                grad = param.grad
                if grad is None or grad.shape != before.shape:
                    continue
                n_lost, n_wanted = lost_update_counts(before, param.detach(), grad)
                lost, wanted = lost + n_lost.to(lost.device), wanted + n_wanted.to(lost.device)
            self._counts = (lost, wanted)
        self._before = []

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None or "loss" not in logs:
            return  # an eval or end-of-training line
        values: dict[str, Any] = {SKIPPED_STEPS: self.skipped_steps}
        scaler = getattr(kwargs.get("optimizer"), "scaler", None)
        if scaler is not None and scaler.is_enabled():
            values[LOSS_SCALE] = float(scaler.get_scale())
        if self._counts is not None:
            lost, wanted = torch.stack(self._counts).tolist()
            self.lost_updates = lost / wanted if wanted else 0.0
            self._counts = None
        if self.lost_updates is not None:
            values[LOST_UPDATES] = self.lost_updates
        if self.nonfinite_step is not None:
            values[NONFINITE_STEP] = self.nonfinite_step
        logs.update(values)
        text: dict[str, Any] = {}
        if self.nonfinite_step is not None and not self._logged_finding:
            self._logged_finding = True
            text[NONFINITE_MODULE] = "" if self.first is None else self.first.module
        if self.contract is not None and not self._logged_contract:
            from ampkit.precision.contract import summary_fields

            self._logged_contract = True
            text.update(summary_fields(self.contract))
        if self.report is not None and not self._logged_doctor:
            self._logged_doctor = True
            text[DOCTOR_PRECISION] = str(self.report.recommendation.precision)
        history = state.log_history
        if history and history[-1].get("step") == state.global_step:
            history[-1].update(values)
            history[-1].update(text)

    # -- the first inf/NaN ---------------------------------------------------------------

    def _check_loss(self, state: Any, optimizer: Any) -> None:
        loss = self._loss
        if self._traced or loss is None:
            return
        if bool(torch.isfinite(loss).all()):  # the Trainer's nan filter has just read it too
            return
        self._traced = True
        self.nonfinite_step = state.global_step + 1
        if self.trace_nonfinite:
            self.first = self._replay(state, optimizer)
        if self.first is None:
            where = (
                "the replay of its micro-batch made none, so it does not reproduce"
                if self.trace_nonfinite
                else "trace_nonfinite=False"
            )
            log.warning(
                "step %d: the loss is %s; no module named (%s)",
                self.nonfinite_step,
                float(loss),
                where,
            )
        else:
            log.warning("step %d: %s", self.nonfinite_step, self.first.message)

    def _replay(self, state: Any, optimizer: Any) -> Any:
        """Run the last micro-batch again under ``detect_nonfinite``; return its finding."""
        from ampkit.doctor import detect_nonfinite

        model, inputs, autocast = self._model, self._inputs, self._autocast
        if model is None or inputs is None or autocast is None:
            return None
        device_type, enabled, dtype = autocast
        scaler = getattr(optimizer, "scaler", None)
        scale = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
        params = [p for p in model.parameters() if p.requires_grad]
        probe = detect_nonfinite(model)
        probe.step = state.global_step  # the replay's forward is this step
        self._replaying = True
        try:
            with _kept_rng(model), probe, torch.enable_grad():
                with torch.autocast(device_type, dtype=dtype, enabled=enabled):
                    output = model(*inputs[0], **inputs[1])
                loss = loss_of(output)
                if loss is not None and loss.requires_grad and params:
                    torch.autograd.grad(loss * scale, params, allow_unused=True)
        finally:
            self._replaying = False
        return probe.first

    # -- the doctor ----------------------------------------------------------------------

    def _diagnose(self, args: Any) -> None:
        from ampkit.doctor import diagnose

        model, inputs = self._model, self._inputs
        if model is None or inputs is None:
            return
        if any(p.dtype != torch.float32 for p in model.parameters() if p.is_floating_point()):
            warnings.warn(
                "AmpkitCallback(doctor_on_start=True): the doctor measures an fp32 model, but "
                "this model holds fp16/bf16 weights; the doctor was skipped. Load the model "
                "in fp32 (mixed precision keeps fp32 weights) to diagnose it.",
                PrecisionWarning,
                stacklevel=2,
            )
            self.doctor_on_start = False
            return
        candidate = "fp16" if args.fp16 else "bf16" if args.bf16 else "auto"

        def closure() -> torch.Tensor:
            loss = loss_of(model(*inputs[0], **inputs[1]))
            if loss is None:
                raise _NoLoss
            return loss

        self._replaying = True
        try:
            with _kept_rng(model):
                self.report = diagnose(model, closure, candidate, steps=1)
        except _NoLoss:
            log.warning(
                "AmpkitCallback(doctor_on_start=True): the model returns no loss, so the "
                "doctor cannot run on its batches; skipped."
            )
            self.doctor_on_start = False
            return
        finally:
            self._replaying = False
        rec = self.report.recommendation
        log.warning(
            "ampkit doctor on the first batch: train in %s%s. %s",
            rec.precision,
            f", keep {', '.join(rec.keep_fp32)} in fp32" if rec.keep_fp32 else "",
            " ".join(rec.reasons),
        )

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def _logs_next(args: Any, state: Any) -> bool:
        """Whether the step about to finish will be logged (the DefaultFlowCallback rule)."""
        every = getattr(state, "logging_steps", 0) or 0
        step = state.global_step + 1
        if args.logging_first_step and step == 1:
            return True
        strategy = str(getattr(args.logging_strategy, "value", args.logging_strategy))
        return strategy == "steps" and every > 0 and step % math.ceil(every) == 0


class _NoLoss(Exception):
    pass


def _contract(args: Any, model: Any, optimizer: Any, strict: bool) -> Any:
    """The dtype contract of the run about to start (warns once, or raises with ``strict``)."""
    from ampkit.precision.contract import check_dtype_contract

    autocast = torch.float16 if args.fp16 else torch.bfloat16 if args.bf16 else None
    return check_dtype_contract(
        optimizer,
        model=model if isinstance(model, nn.Module) else None,
        autocast=autocast,
        caller=f"AmpkitCallback ({'fp16' if args.fp16 else 'bf16' if args.bf16 else 'fp32'}=True)"
        if args.fp16 or args.bf16
        else "AmpkitCallback",
        strict=strict,
    )


def _device_of(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


@contextlib.contextmanager
def _kept_rng(model: nn.Module) -> Any:
    """Restore the CPU (and the model's CUDA device's) random state afterwards."""
    device = _device_of(model)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        yield

"""``Trainer``: a training loop on :class:`~ampkit.MixedPrecision` that never loses a run.

``fit`` in outline (callback hooks in brackets)::

    join the torchrun process group (if launched by torchrun; once, kept until close())
    move the model to the device; channels_last; DDP / FSDP2 wrap; torch.compile
    build the TrainingParts (model, optimizer, scheduler, engine, counters, dist) once
    resume from a verified checkpoint ("auto": the newest one that verifies)
    derive max_steps from the data and the accumulation (with epochs=; steps_for)
    [on_fit_start]
    until max_steps optimizer steps:
        for each micro-batch of the resumable, rank-aware loader:
            with mp.accumulate(model), mp.autocast(): loss = batch_loss(model, batch)
            mp.backward(loss); result = mp.step(optimizer, scheduler)
            if the window ended: [on_step_end]; evaluate every EvalConfig.every steps
                [on_eval]; log [on_log]; checkpoint [on_checkpoint]
            fp32/bf16: a non-finite loss at a logged or checkpoint step stops training
    [on_fit_end] (or [on_exception] when it raised); [close]

The process group stays joined after ``fit`` (so ``save_checkpoint`` still works) until
``Trainer.close()`` or the end of ``with Trainer(...) as trainer:``.

Batch convention: see :mod:`ampkit.precision.batches`.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from ampkit._kwargs import check_keywords
from ampkit._tree import to_device
from ampkit.checkpoint.weights import write_weights
from ampkit.errors import (
    ConfigurationError,
    NonFiniteTrainingError,
    StorageError,
    TrainingInterrupted,
)
from ampkit.precision.batches import batch_loss, batch_output, batch_size_of
from ampkit.precision.devices import fork_rng, peak_memory, reset_peak_memory
from ampkit.precision.engine import MixedPrecision, StepResult
from ampkit.precision.modes import PrecisionMode, TrainingSetup
from ampkit.precision.policy import Policy, resolve_device
from ampkit.precision.scaler import LossScaler
from ampkit.trainer.args import MOVED, OptimizerLike, SchedulerLike, TrainerArgs
from ampkit.trainer.callbacks import Callback, ConsoleLog, MetricsFile, ProgressBar
from ampkit.trainer.checkpointing.checkpointer import Checkpointer
from ampkit.trainer.checkpointing.contents import TrainingParts, full_weights
from ampkit.trainer.config import (
    CheckpointConfig,
    CompileConfig,
    DistributedConfig,
    EvalConfig,
    LoggingConfig,
    check_config,
)
from ampkit.trainer.data import build_loader, example_batch
from ampkit.trainer.distributed import (
    SHARDED_STRATEGIES,
    DistContext,
    agree_on_end,
    init_distributed,
    launched_local_rank,
    teardown_distributed,
    wrap_model,
)
from ampkit.trainer.evaluation import EvalResult, EvalSums, MetricFn, check_metrics
from ampkit.trainer.metrics import Throughput
from ampkit.trainer.parallel import is_sharded, setting_notes
from ampkit.trainer.preemption import StopSignals, StopVote
from ampkit.trainer.result import FitResult
from ampkit.trainer.state import TrainerState

__all__ = ["FitResult", "Trainer"]


log = logging.getLogger("ampkit")


def _configs(
    checkpoint: object, logging: object, eval: object, distributed: object, compile: object
) -> CompileConfig:
    """Refuse an argument that is not its config; return ``compile`` as a CompileConfig."""
    for name, value, kind in (
        ("checkpoint", checkpoint, CheckpointConfig),
        ("logging", logging, LoggingConfig),
        ("eval", eval, EvalConfig),
        ("distributed", distributed, DistributedConfig),
    ):
        check_config(name, value, kind)
    if compile is None or isinstance(compile, bool):
        compile = CompileConfig(enabled=compile)
    check_config("compile", compile, CompileConfig, optional=False)
    best = checkpoint.keep_best if isinstance(checkpoint, CheckpointConfig) else None
    if best is not None:
        known = ["eval_loss", *(f"eval_{name}" for name in getattr(eval, "metrics", {}))]
        if best not in known:
            raise ConfigurationError(
                f"Trainer: CheckpointConfig(keep_best={best!r}) names no value this run "
                f"evaluates ({', '.join(known) if eval is not None else 'no EvalConfig'}). "
                "Pass eval=EvalConfig(every=..., data=...) and keep_best='eval_loss' or "
                "'eval_<metric>'."
            )
    return cast(CompileConfig, compile)


def _check_optimizer(
    model: nn.Module, optimizer: object, strategy: str, mp: MixedPrecision
) -> None:
    if strategy in SHARDED_STRATEGIES and not is_sharded(model):
        if isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigurationError(
                f"Trainer: strategy={strategy!r} replaces the parameters when sharding, so "
                "pass an optimizer factory, e.g. "
                "optimizer=lambda params: torch.optim.AdamW(params)."
            )
    if mp.policy.uses_scaler and isinstance(optimizer, torch.optim.LBFGS):
        raise ConfigurationError(
            "Trainer: LBFGS needs a closure, which fp16 loss scaling cannot scale. "
            "Use precision='bf16' or 'fp32' with LBFGS."
        )


def _default_device(device: torch.device | str | None) -> torch.device | str | None:
    """Under torchrun on CUDA/XPU, the local rank's device when none was given."""
    default = resolve_device(None) if device is None else None
    if default is not None and default.type in ("cuda", "xpu"):
        return torch.device(default.type, launched_local_rank())
    return device


def _callbacks(logging: LoggingConfig, given: Sequence[Callback]) -> list[Callback]:
    """The metrics file and progress bar ``logging`` asks for, then the caller's callbacks."""
    bar = logging.progress_bar
    if bar is None:
        bar = sys.stderr.isatty() and not any(isinstance(c, ProgressBar) for c in given)
    has_bar = bar or any(isinstance(c, ProgressBar) for c in given)
    return [
        *([MetricsFile(logging.metrics_file)] if logging.metrics_file else []),
        *([ProgressBar()] if bar else []),
        *([ConsoleLog(lines=not has_bar)] if logging.console else []),
        *given,
    ]


def _islands(model: nn.Module, keep_fp32: Sequence[str | type[nn.Module]]) -> Any:
    """The fp32 islands of ``keep_fp32``, validated now, before any step (the hooks live as
    long as the model); None without any."""
    if not keep_fp32:
        return None
    from ampkit.precision.fp32_modules import keep_fp32 as make_islands

    return make_islands(model, keep_fp32)


@check_keywords(moved=MOVED)
class Trainer:
    """Fit a model with mixed precision, checkpoints and (under torchrun) DDP or FSDP2.

    Args:
        model: the model (on any device; the Trainer moves it).
        optimizer: an optimizer over ``model``'s parameters, or a factory called with the
            parameters after wrapping (required for ``strategy="fsdp"``).
        max_steps: optimizer steps to train for (a resumed run stops at the same step).
        epochs: instead of ``max_steps``, passes over ``fit``'s training data; the optimizer
            steps are derived from its length (:meth:`steps_for`, readable as
            :attr:`num_training_steps` from set-up on, e.g. by a scheduler factory). Exactly
            one of ``max_steps`` and ``epochs`` is given.
        loss_fn: ``loss_fn(outputs, targets)``; None when the model returns its loss.
        precision: ``"auto"``, a name (``"bf16"``, ``"fp8"``, ...), a :class:`~ampkit.Policy`, or a
            precision mode object holding the mode's options, e.g.
            ``ampkit.Bf16True(...)`` or
            ``ampkit.Fp8(plan=plan)`` (:mod:`ampkit.precision.modes`).
        device, grad_accum_steps, max_grad_norm: as :class:`~ampkit.MixedPrecision`.
        scheduler: an LR scheduler, or a factory called with the optimizer. It steps only
            when the optimizer stepped. A factory runs after the step count is known, so it
            may read ``trainer.num_training_steps`` (e.g. for
            ``transformers.get_linear_schedule_with_warmup``).
        batch_size: per-process micro-batch size, used when ``fit`` gets a Dataset.
        num_workers: DataLoader workers when the Trainer builds the loader (default: 0 on CPU,
            ``min(4, cpus // 2)`` on CUDA).
        seed: seeds the sampler's order (per epoch).
        callbacks: :class:`~ampkit.callbacks.Callback` objects.
        scaler: a configured :class:`~ampkit.LossScaler` for fp16 (default: one with the
            standard settings); refused under bf16/fp32, which need no loss scaling.
        keep_fp32: module names or types to run in fp32 inside autocast
            (:func:`ampkit.precision.fp32_modules`, e.g. ``ampkit doctor``'s recommendation).
            Under ``precision="auto"`` and a low precision, none given keeps the MoE routers
            and the LM head in fp32 (:mod:`ampkit.precision.roles`; ``FitResult.notes`` names
            them); a list given replaces that default.
        final_weights: write the final weights here in fp32 safetensors (rank 0; gathered
            from the shards under FSDP2).
        checkpoint: a :class:`~ampkit.CheckpointConfig` (folder, interval, retention, resume,
            layout, asynchronous writes); None: no checkpoints.
        logging: a :class:`~ampkit.LoggingConfig` (log interval, metrics file, progress bar,
            tokens per sample); None: its defaults.
        eval: an :class:`~ampkit.EvalConfig` (evaluate batches every N steps, with metrics
            such as :func:`ampkit.accuracy`); the results are in ``FitResult.eval_history``,
            the metrics rows and ``Callback.on_eval``. None: no evaluation during training.
        distributed: a :class:`~ampkit.DistributedConfig` (strategy under torchrun, collective
            timeout); None: its defaults (DDP under torchrun).
        compile: a :class:`~ampkit.CompileConfig`, or a bool/None for its ``enabled``
            (None: the precision mode's default: on for fp8 on CUDA, where eager fp8 is slower
            than bf16; off otherwise; False under fp8 on CUDA warns).
        channels_last: channels-last memory format for the model and 4-D inputs (conv nets).
        cudnn_benchmark: let cuDNN pick algorithms per shape (restored after ``fit``).
        handle_signals: during ``fit``, SIGTERM, SIGUSR1, SIGINT and SIGHUP finish the current
            optimizer step, write a checkpoint of it on every rank (all ranks stop at the same
            step) and raise :class:`~ampkit.TrainingInterrupted`; a second signal ends the
            process at once (:mod:`ampkit.trainer.preemption`). The handlers in place before
            are restored when ``fit`` returns. ``ampkit train`` turns this on.

    Under ``precision="fp8"`` (or ``ampkit.Fp8(...)`` without a plan) the plan is measured on
    the first batch of ``fit``'s data (on CUDA; rank 0's plan is used by all); under FSDP2
    with the tensorwise recipe weights are all-gathered in fp8. Under ``"bf16-true"`` the
    logged metrics carry the share of lost updates (the mode's metrics), and a share above
    ``ampkit.precision.bf16_true.LOST_UPDATES_WARN_AT`` warns once.

    ``fit`` stops with :class:`~ampkit.NonFiniteTrainingError` when the fp32/bf16 training
    loss is inf/NaN at a logged step or a checkpoint step (the weights are then no longer
    finite): no checkpoint and no final weights are written after it, so the last checkpoint
    stays the last finite one. Under fp16 the loss scaler skips such steps instead.

    Process group: under ``torchrun`` the Trainer joins the process group when it first needs
    it (``fit``, ``save_checkpoint``, ``evaluate``, ``is_main``), once, and keeps it until
    :meth:`close` (or the end of a ``with Trainer(...) as trainer:`` block), so
    ``trainer.fit(data); trainer.save_checkpoint()`` works. A group the caller initialised
    before is used and never destroyed. A group the Trainer joined and nobody closed is
    destroyed at interpreter exit (so torch does not warn of a leaked group).

    The Trainer holds its configs and the components built from them (``checkpointer``, a
    :class:`~ampkit.trainer.checkpointing.Checkpointer` of ``checkpoint``), never copies of
    their fields; its own keywords are kept in ``args`` (:class:`~ampkit.trainer.args.TrainerArgs`).

    Raises:
        KeywordError: a keyword it does not take (the nearest valid name is suggested), or one
            of an earlier signature (the message names its new form, e.g.
            ``checkpoint=CheckpointConfig(dir=..., every=...)``); a ``TypeError``.
        ConfigurationError: an invalid setting (both or neither of ``max_steps`` and
            ``epochs``, ...), a precision the hardware cannot run, an optimizer needing
            closures under fp16, an optimizer instance with FSDP.
        CheckpointError: ``checkpoint.resume`` names a checkpoint that does not exist, or a
            file.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerLike,
        *,
        max_steps: int | None = None,
        epochs: int | None = None,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        precision: str | Policy | PrecisionMode = "auto",
        device: torch.device | str | None = None,
        grad_accum_steps: int = 1,
        max_grad_norm: float | None = None,
        scheduler: SchedulerLike = None,
        batch_size: int | None = None,
        num_workers: int | None = None,
        seed: int = 0,
        callbacks: Sequence[Callback] = (),
        scaler: LossScaler | None = None,
        keep_fp32: Sequence[str | type[nn.Module]] = (),
        final_weights: str | Path | None = None,
        checkpoint: CheckpointConfig | None = None,
        logging: LoggingConfig | None = None,
        eval: EvalConfig | None = None,
        distributed: DistributedConfig | None = None,
        compile: CompileConfig | bool | None = None,
        channels_last: bool = False,
        cudnn_benchmark: bool = False,
        handle_signals: bool = False,
    ) -> None:
        self.args = TrainerArgs(
            optimizer, scheduler, loss_fn, max_steps, epochs, batch_size, num_workers, seed,
            final_weights, channels_last, cudnn_benchmark, handle_signals,
        )  # fmt: skip
        self.compile_config = _configs(checkpoint, logging, eval, distributed, compile)
        self.logging_config = logging if logging is not None else LoggingConfig()
        self.eval_config = eval
        self.distributed_config = distributed or DistributedConfig()
        self.mp = MixedPrecision(
            precision,
            _default_device(device),
            grad_accum_steps=grad_accum_steps,
            max_grad_norm=max_grad_norm,
            scaler=scaler,
        )
        _check_optimizer(model, optimizer, self.distributed_config.strategy, self.mp)
        self.mp.mode.compile_default(self.compile_config.enabled)  # warns now, not at fit
        self.checkpointer = Checkpointer(checkpoint)
        self.callbacks: list[Callback] = _callbacks(self.logging_config, callbacks)
        self.fp32_islands = _islands(model, keep_fp32)
        self.raw_model = self.model = model
        self.state = TrainerState()
        self.parts: TrainingParts | None = None  # built by fit's set-up
        self.notes: list[str] = []
        self.eval_history: list[EvalResult] = []  # the evaluations of the current fit
        self._dist: DistContext | None = None  # joined on first need (the dist property)
        self._closed = False
        self._max_steps = max_steps  # with epochs: derived by fit (steps_for)
        self._row_start = 1  # the first step of the interval the next logged row covers

    # -- the process group ---------------------------------------------------------------------

    @property
    def dist(self) -> DistContext:
        """Where this process sits in the job. Joins the torchrun process group on first use
        (once); after :meth:`close`, the context it had (nothing is joined again)."""
        if self._dist is None:
            if self._closed:
                return DistContext()
            self._dist = init_distributed(
                self.mp.device.type, timeout_s=self.distributed_config.timeout_s
            )
        return self._dist

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ConfigurationError(
                f"Trainer.{what}: this Trainer was closed (close() or the end of its with "
                "block released its process group). Call it before close(), or make a new "
                "Trainer."
            )

    def close(self) -> None:
        """Release what the Trainer holds: the process group it joined (a group the caller
        initialised is left alone; every rank meets at a barrier first), the checkpoint
        folder's lock and the checkpoint writer's own group. Idempotent; after it, ``fit``, ``save_checkpoint`` and
        ``evaluate`` refuse."""
        self._close(wait_for_all=True)

    def _close(self, *, wait_for_all: bool) -> None:
        if self._closed:
            return
        self._closed = True
        self.checkpointer.close()
        if self._dist is not None:
            teardown_distributed(self._dist, wait_for_all=wait_for_all)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        # after an error a rank may be gone: release without waiting for the others
        self._close(wait_for_all=exc_type is None)

    # -- properties ------------------------------------------------------------------------

    @property
    def step(self) -> int:
        """Optimizer steps done (restored on resume)."""
        return self.state.step

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer trained with (built by ``fit``'s set-up; None before it)."""
        return self.parts.optimizer if self.parts is not None else None

    @property
    def scheduler(self) -> Any:
        """The LR scheduler (built by ``fit``'s set-up), or None."""
        return self.parts.scheduler if self.parts is not None else None

    @property
    def compile(self) -> bool:
        """Whether ``fit`` compiles the model (``CompileConfig.enabled``, or the precision
        mode's default when that is None)."""
        with warnings.catch_warnings():  # the mode warned once, when the Trainer was made
            warnings.simplefilter("ignore")
            return self.mp.mode.compile_default(self.compile_config.enabled)

    @property
    def resume(self) -> str | Path | None:
        """What ``CheckpointConfig.resume`` asks for (None without a CheckpointConfig)."""
        config = self.checkpointer.config
        return config.resume if config is not None else None

    @property
    def resumed_from(self) -> Path | None:
        """The checkpoint this run resumed from, or None for a fresh run."""
        return self.checkpointer.resumed_from

    @property
    def max_steps(self) -> int:
        """The optimizer step training stops at: ``max_steps``, or with ``epochs`` the count
        :meth:`steps_for` derives from ``fit``'s data (known once ``fit`` has started).

        Raises:
            ConfigurationError: read before ``fit`` in an ``epochs`` run.
        """
        if self._max_steps is None:
            raise ConfigurationError(
                f"Trainer: with epochs={self.args.epochs} the number of optimizer steps comes from "
                "the training data, which fit() has not seen yet. Read it inside fit (a "
                "scheduler factory, a callback) or call trainer.steps_for(train_data)."
            )
        return self._max_steps

    @property
    def num_training_steps(self) -> int:
        """The optimizer steps of the whole run (:attr:`max_steps`), the number a scheduler
        such as ``get_linear_schedule_with_warmup`` needs; a scheduler factory may read it.

        Raises:
            ConfigurationError: read before ``fit`` in an ``epochs`` run.
        """
        return self.max_steps

    def steps_for(self, train_data: Any) -> int:
        """The optimizer steps ``fit(train_data)`` trains for.

        With ``max_steps``: that number. With ``epochs``: ``(epochs * per_epoch) //
        grad_accum_steps``, where ``per_epoch`` is the micro-batches one process draws from
        the data in one epoch: for a Dataset ``len(dataset) // world_size // batch_size`` (the
        Trainer's loader deals ``len(dataset) // world_size`` samples to every rank and drops
        an incomplete last batch), for an iterable of batches ``len(train_data)`` (per
        process, e.g. your DataLoader over a ``DistributedSampler``). An accumulation window
        runs on across an epoch's end, as the loop does; the last ``(epochs * per_epoch) %
        grad_accum_steps`` micro-batches, too few for a window, are not trained on. A resumed
        run with the same data, batch size and number of processes stops at the same step.
        Joins the torchrun process group (for the world size) if not yet joined.

        Raises:
            ConfigurationError: with ``epochs``, the data has no length, or fewer
                micro-batches than one accumulation window.
        """
        epochs, batch_size = self.args.epochs, self.args.batch_size
        if epochs is None:
            return self.max_steps
        self._check_open("steps_for")
        if isinstance(train_data, torch.utils.data.Dataset) and hasattr(train_data, "__len__"):
            if batch_size is None:
                raise ConfigurationError(
                    "Trainer: fit() got a Dataset, so batch_size is needed to build the "
                    "loader. Pass batch_size=N (per process)."
                )
            size = len(train_data)
            per_epoch = size // self.dist.world_size // batch_size
            source = (
                f"{size} samples // {self.dist.world_size} process(es) // batch_size {batch_size}"
            )
        elif hasattr(train_data, "__len__"):
            per_epoch = len(train_data)
            source = f"len(train_data) = {per_epoch}"
        else:
            raise ConfigurationError(
                f"Trainer: epochs={epochs} needs the length of the training data, and a "
                f"{type(train_data).__name__} has none. Pass a Dataset (with batch_size) or a "
                "DataLoader, or give max_steps instead of epochs."
            )
        steps = epochs * per_epoch // self.mp.grad_accum_steps
        if steps < 1:
            raise ConfigurationError(
                f"Trainer: epochs={epochs} of {per_epoch} micro-batch(es) per epoch "
                f"({source}) do not fill one accumulation window of grad_accum_steps="
                f"{self.mp.grad_accum_steps}. Use more data, a smaller batch_size or "
                "grad_accum_steps, or more epochs."
            )
        return steps

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (the process that logs and writes checkpoints)."""
        return self.dist.is_main

    @property
    def device(self) -> torch.device:
        """The training device."""
        return self.mp.device

    # -- set-up ------------------------------------------------------------------------------

    def _parts(self) -> TrainingParts:
        if self.parts is None:
            raise ConfigurationError(
                "Trainer: the model, optimizer and scheduler are set up by fit(); call "
                "fit() before save_checkpoint() or evaluate()."
            )
        return self.parts

    def _setup(self, train_data: Any = None) -> None:
        args, config = self.args, self.distributed_config
        model = self.raw_model.to(self.device)
        if args.channels_last:
            # nn.Module.to takes memory_format; torch's type stubs do not list it
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        closure = None
        if train_data is not None:

            def closure() -> torch.Tensor:  # one real batch, read only if the mode asks
                batch = to_device(example_batch(train_data, args.batch_size), self.device)
                return batch_loss(model, batch, args.loss_fn)

        # routers and the LM head under "auto" with no keep_fp32 of the caller's
        if self.mp.policy.requested == "auto" and self.fp32_islands is None and closure is not None:
            self._keep_roles_fp32(model, closure)
        setup = TrainingSetup(
            model,
            closure=closure,
            distributed=self.dist.distributed,
            fsdp=config.strategy in SHARDED_STRATEGIES and self.dist.distributed,
            keep_fp32=self.fp32_islands.modules if self.fp32_islands else (),
        )
        self.notes.extend(self.mp.mode.setup_training(setup))
        model = self.mp.prepare_model(model)
        self.notes += setting_notes(
            config.strategy,
            distributed=self.dist.distributed,
            sharded_before=is_sharded(model),
            hsdp_shard_size=config.hsdp_shard_size,
            cpu_offload=config.cpu_offload,
        )
        self.model = wrap_model(
            model,
            config.strategy,
            self.dist,
            self.mp.policy,
            activation_checkpointing=config.activation_checkpointing,
            hsdp_shard_size=config.hsdp_shard_size,
            cpu_offload=config.cpu_offload,
        )
        optimizer = args.optimizer
        if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = optimizer(self.model.parameters())
        optimizer = self.mp.prepare_optimizer(optimizer)
        self.mp.check_contract(optimizer, self.model)  # FitResult.dtype_contract
        sched = args.scheduler
        scheduler = sched(optimizer) if callable(sched) and not hasattr(sched, "step") else sched
        if self.compile:
            self.model = cast(nn.Module, torch.compile(self.model, mode=self.compile_config.mode))
        self.parts = TrainingParts(
            model=self.raw_model,
            optimizer=optimizer,
            scheduler=scheduler,
            engine=self.mp,
            counters=self.state,
            dist=self.dist,
            sharded=is_sharded(model),  # by this strategy, or by the caller before
            batch_size=args.batch_size,
            seed=args.seed,
        )
        self.checkpointer.start(self.parts)  # the layout; the folder's lock (rank 0)

    def _keep_roles_fp32(self, model: nn.Module, closure: Callable[[], torch.Tensor]) -> None:
        """Under ``precision="auto"`` without ``keep_fp32``: keep the MoE routers and the LM
        head in fp32 (:func:`~ampkit.precision.roles.find_roles`, one forward of the first
        batch with the model's state and the RNG restored), when the precision is low."""
        if self.mp.policy.compute_dtype == torch.float32:
            return
        from ampkit.doctor.isolation import preserved_state
        from ampkit.precision.fp32_modules import keep_fp32 as make_islands
        from ampkit.precision.roles import find_roles

        with preserved_state(model, self.device):
            roles = find_roles(model, closure)
        if roles.names:
            self.fp32_islands = make_islands(model, roles.names)
            self.notes.append(
                f"kept in fp32 by role under precision='auto': {', '.join(roles.names)} (MoE "
                "routers and the LM head; pass keep_fp32=[...] to choose yourself)"
            )

    # -- the loop ------------------------------------------------------------------------------

    def _batches(self, data: Any) -> Iterable[Any]:
        """Micro-batches from the saved position, epoch after epoch."""
        args = self.args
        while True:
            if isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__"):
                if args.batch_size is None:
                    raise ConfigurationError(
                        "Trainer: fit() got a Dataset, so batch_size is needed to build the "
                        "loader. Pass batch_size=N (per process)."
                    )
                loader: Iterable[Any] = build_loader(
                    data,
                    batch_size=args.batch_size,
                    rank=self.dist.rank,
                    world_size=self.dist.world_size,
                    seed=args.seed,
                    epoch=self.state.epoch,
                    start_batch=self.state.batch_in_epoch,
                    device=self.device,
                    num_workers=args.num_workers,
                )
                skip = 0
            elif self.checkpointer.resharded:
                raise ConfigurationError(
                    "Trainer: this run resumed a checkpoint of another number of processes, so "
                    "the data position was recomputed for the Trainer's own loader; pass the "
                    "Dataset (with batch_size) instead of batches, or resume with as many "
                    "processes as wrote the checkpoint."
                )
            else:  # an iterable the user built: replay the epoch up to the saved position
                loader, skip = data, self.state.batch_in_epoch
            fresh_epoch = self.state.batch_in_epoch == 0
            produced = False
            for i, batch in enumerate(loader):
                if i < skip:
                    continue
                produced = True
                yield batch
            if fresh_epoch and not produced:
                raise ConfigurationError(
                    "Trainer: the training data produced no batch. Check its length against "
                    "batch_size (incomplete batches are dropped)."
                )
            self.state.epoch += 1
            self.state.batch_in_epoch = 0

    def fit(self, train_data: Any, val_data: Any = None) -> FitResult:
        """Train until ``max_steps`` (or for ``epochs``); return a :class:`FitResult`.

        ``train_data``: a map-style Dataset (the Trainer builds the loader, rank-aware and
        resumable) or any re-iterable of batches (e.g. your DataLoader; on resume the current
        epoch is replayed up to the saved position, so its order must be deterministic).
        ``val_data``: batches evaluated once at the end (mean loss in ``FitResult.notes``).
        """
        self._check_open("fit")
        _ = self.dist  # join the process group now, before the model is placed or wrapped
        saved_bench = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = self.args.cudnn_benchmark
        signals = StopSignals().install() if self.args.handle_signals else None
        try:
            with self.mp:
                if self.args.epochs is not None:  # before the scheduler factory reads it
                    self._max_steps = self.steps_for(train_data)
                self.eval_history = []
                self._setup(train_data)
                resumed = self.checkpointer.resume(self.logging_config.metrics_file)
                self.notes.extend(resumed.notes)
                for callback in self.callbacks:
                    callback.on_fit_start(self)
                self.notes.extend(
                    f"resume dropped {what}"
                    for callback in self.callbacks
                    if isinstance(callback, MetricsFile)
                    for what in callback.dropped
                )
                result = self._loop(train_data, signals, resumed.precision_change)
                if self.args.final_weights is not None:
                    self._write_final_weights(self.args.final_weights)
                if val_data is not None:
                    result.notes.append(f"validation loss {self.evaluate(val_data):.4f}")
            for callback in self.callbacks:
                callback.on_fit_end(self, result)
            return result
        except BaseException as error:
            # an asynchronous checkpoint still being written
            self._committed(self.checkpointer.finish_after_error())
            for callback in self.callbacks:
                callback.on_exception(self, error)
            raise
        finally:
            self.checkpointer.stop()  # releases the folder's lock
            if signals is not None:  # the handlers of handle_signals, for fit only
                signals.restore()
            for callback in self.callbacks:
                callback.close()
            torch.backends.cudnn.benchmark = saved_bench

    def _loop(
        self, train_data: Any, signals: StopSignals | None, precision_change: str | None
    ) -> FitResult:
        parts, args = self._parts(), self.args
        # the mode's metrics name parameters as the caller's model does: built once, after the
        # set-up wrapped it (DDP and compile prefix the names, FSDP2 swaps in new parameters)
        names = {id(p): n for n, p in parts.model.named_parameters()}
        reset_peak_memory(self.device)
        meter = Throughput(
            self.device,
            world_size=self.dist.world_size,
            grad_accum_steps=self.mp.grad_accum_steps,
            tokens_per_sample=self.logging_config.tokens_per_sample,
        )
        self._row_start = self.state.step + 1
        batches = self._batches(train_data) if self.state.step < self.max_steps else ()
        vote = StopVote(self.dist, self.device) if signals is not None else None
        self.checkpointer.in_loop = True
        for batch in batches:
            batch = to_device(batch, self.device, args.channels_last)
            with self.mp.accumulate(self.model):
                with self.mp.autocast():
                    loss = batch_loss(self.model, batch, args.loss_fn)
                self.mp.backward(loss)
            meter.add(loss, batch_size_of(batch))
            self.state.batch_in_epoch += 1
            if self.mp.micro_step == self.mp.grad_accum_steps and self._logs(self.state.step + 1):
                self.mp.mode.measure_next_step(parts.optimizer)
            result = self.mp.step(parts.optimizer, parts.scheduler)  # runs the step hooks
            if not result.window_done:
                continue
            self.state.step += 1
            done = self.state.step >= self.max_steps
            logged, stopped = self._after_step(result, meter, done, precision_change, names)
            if logged:
                precision_change = None  # noted in the first row after the resume only
            if done or stopped:
                break
            if vote is not None and signals is not None:
                stop = vote.cast(signals.received)
                if stop is not None:
                    self._stop(stop)
        if vote is not None:
            vote.drain()  # the last vote in flight: the run is finishing anyway
        agree_on_end(self.dist, self.state.step)
        self._committed(self.checkpointer.finish())  # an asynchronous write still in flight
        if (best := self.checkpointer.best_note()) is not None:
            self.notes.append(best)
        return self._result(meter)

    def _stop(self, signum: int) -> None:
        """Stop on ``signum`` after the step just done: checkpoint it (every rank), raise."""
        name = signal.Signals(signum).name
        checkpoint: str | None = None
        if self.checkpointer.config is not None:
            self.save_checkpoint()  # skips a step that already has one
            # an asynchronous write: commit it before exiting
            self._committed(self.checkpointer.finish())
            checkpoint = str(self.checkpointer.path_of(self.state.step))
            said = f"checkpoint written to {checkpoint}; continue with resume='auto'"
        else:
            said = (
                "no checkpoint was written (no CheckpointConfig), so the steps done are lost; "
                "pass checkpoint=CheckpointConfig(dir) to keep them"
            )
        self.notes.append(f"stopped by {name} at step {self.state.step}")
        raise TrainingInterrupted(
            f"training: stopped by {name} at step {self.state.step}; {said}.",
            step=self.state.step,
            checkpoint=checkpoint,
            signal=signum,
        )

    def _after_step(
        self,
        result: StepResult,
        meter: Throughput,
        done: bool,
        precision_change: str | None,
        names: Mapping[int, str],
    ) -> tuple[bool, bool]:
        """Callbacks, the logged row and the checkpoint of one finished optimizer step;
        returns whether a metrics row was logged and whether ``EvalConfig.patience`` ran out
        (this step is then the last). ``names``: ``id(parameter) -> name`` for the mode's
        metrics."""
        step, eval_config = self.state.step, self.eval_config
        scores: dict[str, float] | None = None
        for callback in self.callbacks:
            callback.on_step_end(self, result)
        evaluate = eval_config is not None and (step % eval_config.every == 0 or done)
        logged = self._logs(step)
        if logged or precision_change:
            metrics = meter.row(
                step=step,
                lr=self._parts().optimizer.param_groups[0]["lr"],
                scale=result.scale,
                skipped=result.skipped,
                grad_norm=result.grad_norm,
            )
            if evaluate:
                evaluation = self._evaluate_during_fit()
                # what keep_best ranks and patience counts: eval_loss and eval_<metric>
                scores = {
                    "eval_loss": evaluation.loss,
                    **{f"eval_{k}": v for k, v in evaluation.metrics.items()},
                }
                metrics = replace(
                    metrics,
                    eval_loss=evaluation.loss,
                    eval_metrics=dict(evaluation.metrics) if self._eval_metrics else None,
                )
                meter.restart_interval()
            if precision_change:
                metrics = replace(metrics, precision_change=precision_change)
            measured = self.mp.mode.step_metrics(self._parts().optimizer, step=step, names=names)
            metrics = replace(metrics, mode_metrics=measured)
            for callback in self.callbacks:
                callback.on_log(self, metrics)  # the row with the inf/NaN is logged, then we stop
            if self._watch_loss and not math.isfinite(metrics.loss):
                raise self._nonfinite_loss(metrics.loss)
            self._row_start = step + 1

        def finite() -> None:  # one sync per checkpoint, never a NaN one
            if self._watch_loss and not logged and not meter.interval_loss_finite():
                raise self._nonfinite_loss(math.nan)

        stop = scores is not None and not done and self._patience_ran_out()
        saved = self.checkpointer.maybe_save(step, last=done or stop, before=finite, scores=scores)
        self._committed(saved)
        return logged or bool(precision_change), stop

    def _patience_ran_out(self) -> bool:
        """Whether the last ``EvalConfig.patience`` evaluations brought no eval loss below the
        lowest one before them (early stopping); notes it when they did not."""
        patience = self.eval_config.patience if self.eval_config is not None else None
        losses = [evaluation.loss for evaluation in self.eval_history]
        if patience is None or len(losses) <= patience:
            return False
        lowest = min(losses[:-patience])
        if min(losses[-patience:]) < lowest:
            return False
        self.notes.append(
            f"stopped early at step {self.state.step}: {patience} evaluation(s) in a row "
            f"brought no eval loss below {lowest:.6g} (EvalConfig.patience={patience})"
        )
        return True

    @property
    def _watch_loss(self) -> bool:
        """fp32/bf16 apply inf/NaN gradients; fp16's loss scaler skips those steps instead."""
        return not self.mp.policy.uses_scaler

    def _nonfinite_loss(self, value: float) -> NonFiniteTrainingError:
        first, step = self._row_start, self.state.step
        when = (
            f"at step {step}"
            if first >= step
            else f"by step {step} (mean over steps {first}-{step})"
        )
        saved = self.checkpointer.saved
        kept = saved[-1] if saved else self.resumed_from
        after = (
            f"the last checkpoint, {kept}, holds the weights from before. Lower the learning "
            "rate, clip the gradient norm or check the data, then resume from it or start again."
            if kept
            else "no checkpoint of this run holds finite weights. Lower the learning rate, clip "
            "the gradient norm or check the data, then start again."
        )
        return NonFiniteTrainingError(
            f"training: the {self.mp.policy.precision} training loss became non-finite "
            f"({value}) {when}, so the weights are no longer finite. Training stopped without "
            f"writing them; {after}"
        )

    def _logs(self, step: int) -> bool:
        """Whether optimizer step ``step`` writes a metrics row (logged, evaluated or last)."""
        evaluated = self.eval_config is not None and step % self.eval_config.every == 0
        logged = step % self.logging_config.log_every == 0
        return logged or step >= self.max_steps or evaluated

    @property
    def _eval_metrics(self) -> dict[str, MetricFn]:
        return dict(self.eval_config.metrics) if self.eval_config is not None else {}

    def _result(self, meter: Throughput) -> FitResult:
        wall, rate = meter.overall()
        memory, kind = peak_memory(self.device)
        stats = self.mp.stats
        return FitResult(
            precision=self.mp.policy.precision,
            reason=self.mp.policy.reason,
            device=str(self.device),
            world_size=self.dist.world_size,
            steps=self.state.step,  # restored on resume: the whole run's steps
            skipped_steps=stats.skipped_steps,
            final_loss=meter.last_loss,
            samples_per_s=rate,
            tokens_per_s=rate * tokens
            if (tokens := self.logging_config.tokens_per_sample)
            else None,
            wall_s=wall,
            peak_memory_bytes=memory,
            peak_memory_kind=kind,
            resumed_from=str(self.resumed_from) if self.resumed_from else None,
            final_scale=stats.scale,
            checkpoints=list(self.checkpointer.saved),
            notes=list(self.notes),
            scale_history=list(stats.scale_history),
            eval_history=list(self.eval_history),
            mode_fields=self.mp.mode.result_fields(),
            dtype_contract=self.mp.contract.to_dict() if self.mp.contract else None,
        )

    def save_checkpoint(self) -> Path | None:
        """Write a checkpoint of the current step (collective). Skips a step that already has
        one (e.g. the final step coinciding with ``CheckpointConfig.every``). Returns the checkpoint
        committed by this call on rank 0 (with ``async_save``: the previous one, whose
        background write is then complete), else None."""
        self._check_open("save_checkpoint")
        committed = self.checkpointer.save()
        self._committed(committed)
        return committed[-1] if committed else None

    def _committed(self, paths: list[Path]) -> None:
        for path in paths:
            for callback in self.callbacks:
                callback.on_checkpoint(self, path)

    def _write_final_weights(self, path: str | Path) -> None:
        weights = full_weights(self._parts())  # collective under FSDP2: every rank takes part
        if self.is_main:
            try:
                write_weights(path, weights, metadata={"precision": self.mp.policy.precision})
            except StorageError:
                raise
            except OSError as exc:
                raise StorageError.from_os_error(
                    exc, str(path), "Training finished; its last checkpoint (if any) is intact."
                ) from None

    def _evaluate_during_fit(self) -> EvalResult:
        """One evaluation of ``EvalConfig``: kept in the history, passed to the callbacks."""
        config = cast(EvalConfig, self.eval_config)  # called only when one was given
        evaluation = self._evaluate_forked(config.data, self._eval_metrics)
        self.eval_history.append(evaluation)
        for callback in self.callbacks:
            callback.on_eval(self, evaluation)
        return evaluation

    def _evaluate_forked(self, data: Iterable[Any], metrics: Mapping[str, MetricFn]) -> EvalResult:
        """:meth:`evaluate_metrics` with the RNG streams restored afterwards, so that
        evaluating (a shuffling loader, say) leaves the training run exactly as without it."""
        with fork_rng(self.device):
            return self.evaluate_metrics(data, metrics)

    def evaluate(self, data: Iterable[Any]) -> float:
        """Mean loss over ``data`` under the policy's autocast, without gradients (the
        mean of the batches' losses over every rank; collective under torchrun)."""
        return self.evaluate_metrics(data, {}).loss

    @torch.no_grad()
    def evaluate_metrics(
        self, data: Iterable[Any], metrics: Mapping[str, MetricFn] | None = None
    ) -> EvalResult:
        """Evaluate ``data``: the mean loss and each metric, exact over all of it.

        Each batch runs under the policy's autocast in eval mode without gradients; each
        metric ``metric(outputs, batch) -> (total, count)`` sees the model's output and the
        batch on the device, and its value is ``sum(total) / sum(count)`` over every batch of
        every rank (all-reduced under torchrun: every rank calls this, each with its share).

        Args:
            data: the batches (any iterable), in the batch convention of ``fit``.
            metrics: name -> metric function (e.g. ``{"accuracy": ampkit.accuracy}``); None:
                those of ``EvalConfig``.

        Returns:
            An :class:`~ampkit.trainer.evaluation.EvalResult` at the current step.

        Raises:
            ConfigurationError: a metric is not valid or returned something other than
                ``(total, count)``; ``fit`` has not set up the model yet.
            DataError: ``data`` held no batch, or a metric counted no item over the whole of
                it.
        """
        self._check_open("evaluate")
        if metrics is None:
            metrics = self._eval_metrics
        check_metrics("Trainer.evaluate_metrics", metrics)
        sums = EvalSums(metrics, self.device)
        was_training = self.model.training
        self.model.eval()
        try:
            for batch in data:
                batch = to_device(batch, self.device, self.args.channels_last)
                with self.mp.autocast():
                    loss, outputs = batch_output(self.model, batch, self.args.loss_fn)
                sums.add(loss, outputs, batch)
        finally:
            self.model.train(was_training)
        return sums.result(self.state.step, distributed=self.dist.distributed)

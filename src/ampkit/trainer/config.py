"""The Trainer's grouped settings: validated config dataclasses.

The common arguments are keywords of :class:`~ampkit.Trainer` (model, optimizer, max_steps,
loss_fn, precision, device, ...); the rest come in groups, each checked when it is made
(``__post_init__``), so a bad setting is refused before any model is moved or any process
group joined::

    Trainer(
        model, optimizer, max_steps=1000, precision="bf16",
        checkpoint=CheckpointConfig("ckpt", every=100, keep_last=3, resume="auto"),
        logging=LoggingConfig(log_every=10, metrics_file="metrics.jsonl"),
        eval=EvalConfig(every=100, data=val_batches),
        distributed=DistributedConfig(strategy="fsdp"),
        compile=CompileConfig(mode="max-autotune"),
    )

Each config is frozen; :func:`dataclasses.replace` makes a changed copy (and checks it again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ampkit._kwargs import check_keywords
from ampkit._validate import check_int, is_number
from ampkit.errors import CheckpointError, ConfigurationError
from ampkit.trainer.distributed import SHARDED_STRATEGIES, STRATEGIES, Strategy
from ampkit.trainer.evaluation import MetricFn, check_metrics
from ampkit.trainer.parallel import check_module_targets

__all__ = [
    "CheckpointConfig",
    "CompileConfig",
    "DistributedConfig",
    "EvalConfig",
    "LoggingConfig",
    "check_count",
    "check_config",
    "check_length",
]

#: The checkpoint layouts a run may ask for (``auto``: sharded under FSDP2 or with async
#: writes, else full).
LAYOUT_CHOICES = ("auto", "full", "sharded")


def check_count(owner: str, name: str, value: object, *, optional: bool = True) -> None:
    """Refuse ``value`` unless it is an integer >= 1 (or None when ``optional``).

    Raises:
        ConfigurationError: naming ``owner`` and the argument.
    """
    check_int(name, value, low=1, allow_none=optional, where=owner)


def _check_bool(owner: str, name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, bool):
        allowed = "True or False" + (" (or None)" if optional else "")
        raise ConfigurationError(f"{owner}: {name}={value!r} is invalid. It must be {allowed}.")


@check_keywords
@dataclass(frozen=True)
class CheckpointConfig:
    """Where and when the Trainer writes checkpoints, and what it resumes from.

    Attributes:
        dir: folder for ``step-NNNNNNNN`` checkpoints.
        every: write a checkpoint every N optimizer steps (and always at the end); None: only
            at the end.
        keep_last: keep only the newest N checkpoints (None: keep all).
        resume: ``"auto"`` (newest valid checkpoint in ``dir``, else start fresh), a checkpoint
            folder, or None (fresh; refuses a ``dir`` that already holds checkpoints). A
            checkpoint from another number of processes is resharded (see docs/trainer.md).
        layout: ``"full"`` (one fp32 safetensors file, gathered to rank 0), ``"sharded"``
            (``torch.distributed.checkpoint``: every rank writes its shards) or ``"auto"``
            (sharded under FSDP2 or with ``async_save``, else full).
        async_save: write sharded checkpoints in a background thread while training
            continues; each is committed (manifest, ``COMPLETE``) at the next checkpoint or at
            the end of ``fit``, once its files are on disk.
        allow_precision_change: allow resuming a checkpoint saved under another precision
            (e.g. fp16 -> bf16 after a divergence): weights and optimizer state carry over,
            the loss-scaler state is dropped, and the change is noted in ``FitResult.notes``
            and in the first metrics row after the resume (``precision_change``).
        run_config: the run's settings (JSON-ready), recorded as ``config`` in every
            checkpoint's manifest so that a resume can compare them (``ampkit train`` does).
        keep_best: an evaluated value (``"eval_loss"``, or ``"eval_<name>"`` of a metric of
            ``EvalConfig.metrics``): the checkpoint of the evaluated step with the best value
            is kept besides the newest ``keep_last`` (``Checkpointer.best``; a note in
            ``FitResult.notes``). Needs an ``EvalConfig``; only checkpoints of evaluated steps
            compete (``every`` a multiple of ``EvalConfig.every`` makes them all evaluated).
            The best is tracked within one ``fit``: after a resume, from the resumed step on.
        best_mode: ``"min"`` (a loss) or ``"max"`` (an accuracy): which value of
            ``keep_best`` is best.

    Raises:
        ConfigurationError: a count that is not an integer >= 1, an unknown layout, async
            writes with the full layout, a flag that is not a bool, a ``keep_best`` that is
            not an ``eval_...`` name or a ``best_mode`` other than ``"min"``/``"max"``.
        CheckpointError: ``resume`` names a file, or a folder that does not exist.
    """

    dir: str | Path
    every: int | None = None
    keep_last: int | None = None
    resume: str | Path | None = None
    layout: str = "auto"
    async_save: bool = False
    allow_precision_change: bool = False
    run_config: Mapping[str, Any] | None = None
    keep_best: str | None = None
    best_mode: str = "min"

    def __post_init__(self) -> None:
        owner = "CheckpointConfig"
        if self.keep_best is not None and (
            not isinstance(self.keep_best, str) or not self.keep_best.startswith("eval_")
        ):
            raise ConfigurationError(
                f"{owner}: keep_best={self.keep_best!r} is invalid. Pass an evaluated value: "
                "'eval_loss', or 'eval_<name>' for a metric of EvalConfig.metrics."
            )
        if self.best_mode not in ("min", "max"):
            raise ConfigurationError(
                f"{owner}: best_mode={self.best_mode!r} is invalid. Use 'min' (a loss) or "
                "'max' (an accuracy)."
            )
        if not isinstance(self.dir, (str, Path)) or not str(self.dir):
            raise ConfigurationError(
                f"{owner}: dir={self.dir!r} is invalid. Pass the folder for the checkpoints, "
                "e.g. CheckpointConfig('runs/a/checkpoints')."
            )
        check_count(owner, "every", self.every)
        check_count(owner, "keep_last", self.keep_last)
        _check_bool(owner, "async_save", self.async_save)
        _check_bool(owner, "allow_precision_change", self.allow_precision_change)
        if self.layout not in LAYOUT_CHOICES:
            raise ConfigurationError(
                f"{owner}: layout={self.layout!r} is unknown. Use 'auto', 'full' or 'sharded'."
            )
        if self.async_save and self.layout == "full":
            raise ConfigurationError(
                f"{owner}: async_save=True writes with torch.distributed.checkpoint, which "
                "needs layout='sharded' (or 'auto'), not 'full'."
            )
        if self.run_config is not None and not isinstance(self.run_config, Mapping):
            raise ConfigurationError(
                f"{owner}: run_config is a {type(self.run_config).__name__}. Pass a mapping "
                "of JSON-ready settings, or None."
            )
        resume = self.resume
        if resume is None or resume == "auto":
            return
        if not isinstance(resume, (str, Path)):
            raise ConfigurationError(
                f"{owner}: resume={resume!r} is invalid. Pass 'auto', a step-NNNNNNNN "
                "checkpoint folder, or None."
            )
        if Path(resume).is_file():
            raise CheckpointError(
                f"resume: {resume} is a file, not a checkpoint folder. Pass a step-NNNNNNNN "
                "folder (e.g. ckpt/step-00000500), or 'auto' to continue from the newest valid "
                "checkpoint in the checkpoint dir."
            )
        if not Path(resume).is_dir():
            raise CheckpointError(
                f"resume: {resume} does not exist. Pass a step-NNNNNNNN folder, or 'auto' to "
                "continue from the newest valid checkpoint in the checkpoint dir."
            )

    @property
    def path(self) -> Path:
        """``dir`` as a path."""
        return Path(self.dir)


@check_keywords
@dataclass(frozen=True)
class LoggingConfig:
    """What the Trainer logs, and where.

    Attributes:
        log_every: optimizer steps between logged metrics rows (one device sync each; the
            last step and every evaluated step are logged too).
        metrics_file: write logged metrics here as JSON lines (rank 0); None: nowhere.
        progress_bar: show a :class:`~ampkit.callbacks.ProgressBar` (rank 0). None: when
            stderr is a terminal and no ProgressBar is among the Trainer's ``callbacks``.
        tokens_per_sample: tokens in one sample, to report tokens/s (e.g. the sequence
            length); None: samples/s only.
        console: write one line per logged step (when no progress bar is shown) and a
            summary of the run at the end of ``fit`` to stderr (rank 0,
            :class:`~ampkit.trainer.callbacks.ConsoleLog`); False: write nothing.

    Raises:
        ConfigurationError: a count that is not an integer >= 1, a flag that is not a bool.
    """

    log_every: int = 10
    metrics_file: str | Path | None = None
    progress_bar: bool | None = None
    tokens_per_sample: int | None = None
    console: bool = True

    def __post_init__(self) -> None:
        owner = "LoggingConfig"
        check_count(owner, "log_every", self.log_every, optional=False)
        check_count(owner, "tokens_per_sample", self.tokens_per_sample)
        _check_bool(owner, "progress_bar", self.progress_bar, optional=True)
        _check_bool(owner, "console", self.console)
        if self.metrics_file is not None and not isinstance(self.metrics_file, (str, Path)):
            raise ConfigurationError(
                f"{owner}: metrics_file={self.metrics_file!r} is invalid. Pass a file path, "
                "or None."
            )


@check_keywords
@dataclass(frozen=True)
class EvalConfig:
    """Evaluation during training.

    Attributes:
        every: evaluate ``data`` every N optimizer steps (and at the last step); the mean
            loss is the ``eval_loss`` of that step's metrics row.
        data: the batches to evaluate (a re-iterable, e.g. a DataLoader), under the policy's
            autocast without gradients; the training RNG is not touched. Under DDP each rank
            evaluates the batches it is given (its share of the eval set).
        metrics: name -> ``metric(outputs, batch) -> (total, count)``, e.g.
            ``{"accuracy": ampkit.accuracy}``: each metric's value is the sum of its totals
            over the sum of its counts over every eval batch of every rank (exact, whatever
            the batch sizes), logged as ``eval_<name>`` in the step's metrics row and kept in
            ``FitResult.eval_history`` (:mod:`ampkit.trainer.evaluation`).
        patience: stop early once this many evaluations in a row brought no eval loss below
            the lowest one before them; the step of the last evaluation is then the run's last
            (checkpointed, its final weights written, noted in ``FitResult.notes``). None:
            train to ``max_steps``. Counted within one ``fit`` (a resume counts anew).

    Raises:
        ConfigurationError: ``every`` or ``patience`` is not an integer >= 1, ``data`` is
            None or cannot be iterated, or ``metrics`` is not a mapping of names to functions
            (or names a metric ``loss``).
    """

    every: int
    data: Any
    metrics: Mapping[str, MetricFn] = field(default_factory=dict)
    patience: int | None = None

    def __post_init__(self) -> None:
        check_count("EvalConfig", "every", self.every, optional=False)
        check_count("EvalConfig", "patience", self.patience)
        if self.data is None or not hasattr(self.data, "__iter__"):
            raise ConfigurationError(
                f"EvalConfig: data={type(self.data).__name__} is not iterable. Pass the "
                "batches to evaluate (a list or a DataLoader)."
            )
        check_metrics("EvalConfig", self.metrics)


@check_keywords
@dataclass(frozen=True)
class DistributedConfig:
    """How the Trainer runs under ``torchrun``, and what it does for models too big for plain
    data parallelism.

    Attributes:
        strategy: ``"auto"`` (DDP under torchrun), ``"ddp"``, ``"fsdp"`` (FSDP2: pass an
            optimizer factory), ``"hsdp"`` (FSDP2 over a 2-D mesh, replicate x shard: each
            parameter sharded within a group of ``hsdp_shard_size`` processes, replicated
            across the groups; an optimizer factory too) or ``"none"`` (each process trains
            alone; a model the caller already sharded with ``fully_shard`` is used as it is).
        timeout_s: seconds a collective may wait for the other processes before it fails
            (used when the Trainer joins the torchrun process group itself).
        hsdp_shard_size: processes per HSDP shard group (``strategy="hsdp"`` only); it must
            divide the world size. None: one node (``LOCAL_WORLD_SIZE``), so replicas span
            the nodes and the shards stay within one.
        activation_checkpointing: module names (``"blocks.0"``) and/or ``nn.Module`` types
            whose activations are recomputed in the backward pass instead of kept (torch's
            non-reentrant checkpointing, RNG state preserved, so dropout draws the same mask
            and gradients equal those without it). Works with every strategy and in a single
            process; module names and checkpoints are unchanged.
        cpu_offload: FSDP2's ``CPUOffloadPolicy`` (``strategy="fsdp"`` or ``"hsdp"``): the
            sharded parameters, gradients and optimizer state live in host memory and the
            optimizer steps there. On a CPU-only machine the model lives there already, so it
            moves nothing and gives the same result as without it.

    Raises:
        ConfigurationError: an unknown strategy, a timeout that is not a positive number,
            ``hsdp_shard_size`` without ``strategy="hsdp"`` or not an integer >= 1,
            ``cpu_offload`` without a sharding strategy, or an ``activation_checkpointing``
            entry that is neither a module name nor an ``nn.Module`` type.
    """

    strategy: Strategy = "auto"
    timeout_s: float = 600.0
    hsdp_shard_size: int | None = None
    activation_checkpointing: Sequence[str | type[nn.Module]] = ()
    cpu_offload: bool = False

    def __post_init__(self) -> None:
        owner = "DistributedConfig"
        if self.strategy not in STRATEGIES:
            raise ConfigurationError(
                f"{owner}: strategy={self.strategy!r} is unknown. Use one of "
                f"{', '.join(repr(s) for s in STRATEGIES)}."
            )
        timeout = self.timeout_s
        if not is_number(timeout, 0, open_low=True):
            raise ConfigurationError(
                f"{owner}: timeout_s={timeout!r} is invalid. It must be a number of seconds > 0."
            )
        check_count(owner, "hsdp_shard_size", self.hsdp_shard_size)
        if self.hsdp_shard_size is not None and self.strategy != "hsdp":
            raise ConfigurationError(
                f"{owner}: hsdp_shard_size={self.hsdp_shard_size} applies to strategy='hsdp' "
                f"only, not {self.strategy!r}. Pass strategy='hsdp', or drop hsdp_shard_size."
            )
        _check_bool(owner, "cpu_offload", self.cpu_offload)
        if self.cpu_offload and self.strategy not in SHARDED_STRATEGIES:
            raise ConfigurationError(
                f"{owner}: cpu_offload=True is FSDP2's offload policy, which needs "
                f"strategy='fsdp' or 'hsdp', not {self.strategy!r}."
            )
        targets = check_module_targets("activation_checkpointing", self.activation_checkpointing)
        object.__setattr__(self, "activation_checkpointing", targets)


@check_keywords
@dataclass(frozen=True)
class CompileConfig:
    """``torch.compile`` of the model.

    Attributes:
        enabled: compile the model. None: on for fp8 on CUDA (eager fp8 is slower than bf16),
            off otherwise; False under fp8 on CUDA warns.
        mode: ``torch.compile``'s mode, e.g. ``"reduce-overhead"`` or ``"max-autotune"``
            (None: torch's default).

    The Trainer's ``compile`` argument also takes a bool (or None) for
    ``CompileConfig(enabled=...)``.

    Raises:
        ConfigurationError: ``enabled`` is not a bool or None, or ``mode`` is not a string.
    """

    enabled: bool | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        _check_bool("CompileConfig", "enabled", self.enabled, optional=True)
        if self.mode is not None and (not isinstance(self.mode, str) or not self.mode):
            raise ConfigurationError(
                f"CompileConfig: mode={self.mode!r} is invalid. Pass one of torch.compile's "
                "modes (e.g. 'reduce-overhead', 'max-autotune'), or None."
            )


def check_length(max_steps: object, epochs: object) -> None:
    """Refuse a Trainer given both or neither of ``max_steps`` and ``epochs``, or either
    that is not an integer >= 1.

    Raises:
        ConfigurationError: naming the argument and what to pass.
    """
    if (max_steps is None) == (epochs is None):
        given = "both" if max_steps is not None else "neither"
        raise ConfigurationError(
            f"Trainer: got {given} of max_steps and epochs. Pass exactly one: max_steps=N "
            "(optimizer steps) or epochs=N (passes over the training data; the steps are "
            "derived from its length, see Trainer.steps_for)."
        )
    check_count("Trainer", "max_steps", max_steps)
    check_count("Trainer", "epochs", epochs)


def check_config(name: str, value: object, kind: type, *, optional: bool = True) -> None:
    """Refuse a Trainer argument that is not a ``kind`` config (or None when ``optional``).

    Raises:
        ConfigurationError: naming the argument, what was given and the config to pass.
    """
    if value is None and optional:
        return
    if not isinstance(value, kind):
        raise ConfigurationError(
            f"Trainer: {name}= takes a {kind.__name__}, not a {type(value).__name__}. Pass "
            f"{name}={kind.__name__}(...) (from ampkit)."
        )

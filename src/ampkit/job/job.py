"""``train``: the built-in GPT trained end to end on :class:`~ampkit.Trainer`.

This is the functional core of ``ampkit train``: it takes a :class:`TrainConfig`, reports each
logged step to callbacks and returns a :class:`TrainSummary`. It prints nothing; the command
line draws the progress bar and the summary.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, cast

import torch

from ampkit._files import write_json
from ampkit._process import launched_by_ampkit
from ampkit.errors import ConfigurationError, MissingDependencyError, StorageError
from ampkit.job.config import TrainConfig
from ampkit.job.model_data import ModelData, eval_batches, resolve_model_data
from ampkit.job.resume import override_lr, run_record
from ampkit.job.run_folder import RunPlan, open_run_folder
from ampkit.models.corpus import ByteCorpus, CorpusWindows, load_corpus
from ampkit.models.gpt import GPT, GPTConfig
from ampkit.precision.modes import (
    PrecisionMode,
    declared_fields,
    precision_mode,
)
from ampkit.precision.policy import resolve_precision
from ampkit.precision.scaler import LossScaler
from ampkit.trainer.callbacks import Callback, NonFiniteMonitor, TensorBoard, TrainerView
from ampkit.trainer.config import (
    CheckpointConfig,
    CompileConfig,
    DistributedConfig,
    EvalConfig,
    LoggingConfig,
)
from ampkit.trainer.distributed import Strategy, launched_world_size
from ampkit.trainer.evaluation import accuracy
from ampkit.trainer.metrics import StepMetrics
from ampkit.trainer.result import FitResult
from ampkit.trainer.trainer import Trainer

__all__ = ["TrainConfig", "TrainSummary", "prepare_run", "train"]


@dataclass(frozen=True)
class TrainSummary:
    """What a run did, for the end-of-run summary and ``summary.json``: the Trainer's
    :class:`~ampkit.FitResult` plus what only the job knows.

    Every field of the result (``summary.steps``, ``summary.final_loss``, ...) and every field
    the precision mode declares (``summary.mode_fields``) reads as an attribute of the
    summary. ``nothing_to_do`` is set (to the line that says so) when the run was resumed after
    it had already done all its steps: nothing was trained or written, and the result is that
    of the earlier run's ``summary.json``.

    Attributes:
        result: what ``Trainer.fit`` returned.
        data: where the text came from.
        parameters: parameters of the GPT.
        out: the run folder, if any.
        notes: the job's notes (the run folder's) and the Trainer's.
        config: the run's settings (:meth:`TrainConfig.to_dict`).
        nothing_to_do: the line of a finished run resumed again, else None.
    """

    result: FitResult
    data: str
    parameters: int
    out: str | None = None
    notes: list[str] = field(default_factory=list)
    config: dict[str, object] = field(default_factory=dict)
    nothing_to_do: str | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "result" not in self.__dict__:
            raise AttributeError(f"'TrainSummary' object has no attribute {name!r}")
        return getattr(self.__dict__["result"], name)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values, as ``summary.json`` has them: the result's fields, the
        precision mode's as keys of their own, then the job's."""
        values = asdict(self.result)
        values.update(values.pop("mode_fields"))
        values.update((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "result")
        values["mode_rows"] = [list(row) for row in self.mode_rows]
        return values

    @property
    def mode_rows(self) -> list[tuple[str, str]]:
        """The precision mode's own rows of the end-of-run summary (``summary_rows`` of its
        class over the fields it reported); none for a mode that adds none."""
        from ampkit.precision.modes import MODES

        mode = MODES.get(self.result.precision)
        return mode.summary_rows(self.result.mode_fields) if mode is not None else []


def _fused_adamw(params: list[Any]) -> bool | None:
    """True when torch has a fused AdamW kernel for every (device, dtype) of ``params``
    (found by running one fused step on a tiny tensor of each), else None (torch's default).
    Plain tensors only: a DTensor (FSDP2) keeps the default."""
    tensors = [
        p for group in params for p in (group["params"] if isinstance(group, dict) else [group])
    ]
    if not tensors or any(type(t) not in (torch.Tensor, torch.nn.Parameter) for t in tensors):
        return None
    for device, dtype in {(t.device, t.dtype) for t in tensors}:
        probe = torch.zeros(2, device=device, dtype=dtype, requires_grad=True)
        probe.grad = torch.zeros_like(probe)
        try:
            torch.optim.AdamW([probe], fused=True).step()
        except (RuntimeError, ValueError, TypeError):
            return None
    return True


def _warmup(warmup_steps: int) -> Callable[[int], float]:
    return lambda done: min(1.0, (done + 1) / warmup_steps) if warmup_steps else 1.0


class _Forward(Callback):
    """Hands each logged step to a plain function (the CLI's progress display)."""

    def __init__(self, function: Callable[[StepMetrics], None]) -> None:
        self.function = function

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        if trainer.is_main:
            self.function(metrics)


class _ApplyLr(Callback):
    """After the resume (before any step): make ``--lr`` the schedule's base learning rate."""

    def __init__(self, lr: float, parts: dict[str, Any]) -> None:
        self.lr, self.parts = lr, parts

    def on_fit_start(self, trainer: TrainerView) -> None:
        if trainer.resumed_from is not None:
            override_lr(self.parts["optimizer"], self.parts.get("scheduler"), self.lr)


def _loggers(config: TrainConfig, out: Path | None) -> list[Callback]:
    """The trackers of ``--logger`` (TensorBoard also without it, when installed and the run
    has ``--out``).

    Raises:
        MissingDependencyError: a tracker's package is not installed.
    """
    import importlib.util

    from ampkit.trainer.loggers import MLflowLogger, WandbLogger

    install = {
        "tensorboard": "tensorboard",
        "mlflow": "'ampkit[mlflow]'",
        "wandb": "'ampkit[wandb]'",
    }
    for name in config.loggers:
        if importlib.util.find_spec(name) is None:
            raise MissingDependencyError(
                f"logger: {name} was asked for, but the {name} package is not installed. "
                f"Install it (pip install {install[name]}), or drop the {name} logger.",
                argument="logger",
            )
    chosen: list[Callback] = []
    if "tensorboard" in config.loggers or (out and TensorBoard.available()):
        chosen.append(TensorBoard((out or Path(".")) / "tensorboard"))
    if "mlflow" in config.loggers:
        uri = out / "mlruns" if out else None
        chosen.append(MLflowLogger(uri, run_name=out.name if out else None))
    if "wandb" in config.loggers:
        chosen.append(WandbLogger(dir=out, name=out.name if out else None))
    return chosen


def _resolve(
    config: TrainConfig, world_size: int, device: torch.device | str | None = None
) -> tuple[ByteCorpus | ModelData, PrecisionMode]:
    """Check the settings, the device and precision, and the data for ``world_size``
    processes; return the data (the corpus of the built-in GPT, or the ``--model`` and its
    dataset) and the run's precision mode, resolved once for ``device`` (default:
    ``config.device``)."""
    config.validate()
    # the precision as the settings check read it (config.parsed_precision): not parsed again
    policy = resolve_precision(config.parsed_precision, device or config.device)
    mode = precision_mode(policy, **config.mode_options)
    data: ByteCorpus | ModelData
    if config.model == "gpt":
        data = load_corpus(config.data)
        data.validate(config.batch_size, config.seq_len, world_size=world_size)
    else:
        data = resolve_model_data(config)
        data.validate(config.batch_size, world_size=world_size)
    _saves_hf(config, data.built.model if isinstance(data, ModelData) else GPT)
    return data, mode


def _process_device(config: TrainConfig) -> torch.device | str | None:
    """This process's device, as the Trainer picks it: under torchrun without ``--device``,
    the GPU of the local rank."""
    if config.device is None and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return config.device


@contextmanager
def prepare_run(
    config: TrainConfig,
    world_size: int,
    *,
    lock_shared_with: int | None = None,
    given: Collection[str] | None = None,
    is_main: bool = True,
) -> Iterator[RunPlan]:
    """Check everything a run needs before any process trains, and hold ``--out``.

    The ``--nproc`` launcher calls this before starting torchrun, so a bad setting is refused
    once instead of once per rank; the lock on ``--out`` is held until the ``with`` ends. The
    launcher of a node other than the first (``is_main=False``) only checks: the first node's
    launcher holds the folder, which every node must share.

    Raises:
        ConfigurationError, DataError, CheckpointError, RunInUseError, StorageError: as
            :func:`train`.
    """
    corpus, mode = _resolve(config, world_size)
    with open_run_folder(
        config,
        is_main=is_main,
        data_sha256=functools.cache(corpus.sha256),
        precision=mode.policy.precision,
        lock_shared_with=lock_shared_with,
        given=given,
        world_size=world_size,
    ) as plan:
        yield plan


def train(
    config: TrainConfig,
    callbacks: Sequence[Callback | Callable[[StepMetrics], None]] = (),
    *,
    given: Collection[str] | None = None,
) -> TrainSummary:
    """Train the built-in GPT as ``config`` says on :class:`~ampkit.Trainer`.

    ``callbacks`` are :class:`~ampkit.Callback` objects, or plain functions that get every
    logged step's :class:`StepMetrics` (rank 0 only). Under ``torchrun`` every process runs
    this; ``batch_size`` is per process. With ``out``, rank 0 locks the folder for the run
    (:mod:`ampkit.job.run_folder`), and every checkpoint records the settings, which a resume
    compares with its own (:mod:`ampkit.job.resume`).

    On resume, the settings of :data:`~ampkit.job.resume.CARRIED` (steps, log and checkpoint
    intervals, keep-last) not named in ``given`` (the command line passes the flags it was
    given) are taken from the checkpoint; ``given=None`` carries nothing. A resume of a run
    that had already done its steps trains and writes nothing and returns the earlier run's
    summary with ``nothing_to_do`` set.

    Raises:
        ConfigurationError: invalid settings, a precision the device cannot run, an ``out``
            that cannot be created or holds an earlier run, or a resume with other settings.
        DataError: the data file is missing, unreadable, empty, binary, or too small.
        CheckpointError: ``resume`` names a missing, corrupt or mismatched checkpoint, or
            ``resume="auto"`` finds no valid one but an earlier run's outputs.
        RunInUseError: another run holds ``out``.
        StorageError: the disk is full (or read-only) where an output is written.
        NonFiniteTrainingError: the fp32/bf16 loss became inf/NaN, or fp16 gradients stayed
            inf/NaN at the minimum loss scale.
    """
    world = launched_world_size()
    corpus, mode = _resolve(config, world, _process_device(config))
    digest = functools.cache(corpus.sha256)
    with open_run_folder(
        config,
        is_main=os.environ.get("RANK", "0") == "0",
        data_sha256=digest,
        precision=mode.policy.precision,
        lock_shared_with=launched_by_ampkit(),
        given=given,
        world_size=world,
    ) as plan:
        config = plan.config or config
        if plan.finished is not None:
            return _earlier_summary(config, plan.finished)
        return _train(config, callbacks, corpus, mode, plan, digest)


def _earlier_summary(config: TrainConfig, line: str) -> TrainSummary:
    """The finished run's ``summary.json`` as a :class:`TrainSummary`, marked as nothing to do
    (its fields are empty where the file cannot be read)."""
    try:
        recorded = json.loads((Path(str(config.out)) / "summary.json").read_text())
        if not isinstance(recorded, dict):
            raise ValueError(recorded)
    except (OSError, ValueError):
        recorded = {}
    declared = declared_fields("result")
    try:
        result = FitResult(
            **{
                **{f.name: _empty(f.type) for f in fields(FitResult) if _required(f)},
                **{f.name: recorded[f.name] for f in fields(FitResult) if f.name in recorded},
                "eval_history": [],
                "mode_fields": {k: v for k, v in recorded.items() if k in declared},
            }
        )
        own = {k: recorded[k] for k in ("data", "parameters", "notes", "config") if k in recorded}
        return TrainSummary(
            result=result,
            **{"data": "", "parameters": 0, **own},
            out=config.out,
            nothing_to_do=line,
        )
    except (TypeError, ValueError):
        empty = FitResult(**{f.name: _empty(f.type) for f in fields(FitResult) if _required(f)})
        return TrainSummary(result=empty, data="", parameters=0, out=config.out, nothing_to_do=line)


def _evaluation(config: TrainConfig, data: ByteCorpus | ModelData) -> EvalConfig | None:
    """The Trainer's evaluation of ``--eval-data`` (None without it).

    Raises:
        ConfigurationError, DataError, MissingDependencyError: as for ``--data``, named
            ``--eval-data``.
    """
    if config.eval_data is None:
        return None
    if isinstance(data, ModelData):
        held = resolve_model_data(replace(config, data=config.eval_data), data.built)
        dataset: Any = held.dataset
        stride = config.seq_len if held.tokens_per_sample == config.seq_len else 1
    else:
        dataset, stride = (
            CorpusWindows(load_corpus(config.eval_data), config.seq_len),
            config.seq_len,
        )
    every = config.eval_every or config.checkpoint_every or config.log_every
    return EvalConfig(
        every=every,
        data=eval_batches(dataset, config.batch_size, stride),
        metrics={"accuracy": accuracy} if config.metric == "accuracy" else {},
        patience=config.patience,
    )


def _saves_hf(config: TrainConfig, model: Any) -> bool:
    """Whether the run writes OUT/hf (``--save-format``; default: for ``hf:`` models).

    Raises:
        ConfigurationError: ``--save-format hf`` for a model without ``save_pretrained``.
    """
    wanted = config.save_format or ("hf" if config.model.startswith("hf:") else "none")
    if wanted == "hf" and not hasattr(model, "save_pretrained"):
        raise ConfigurationError(
            f"--save-format: hf writes a save_pretrained folder, and {config.model} builds "
            f"{getattr(model, '__name__', type(model).__name__)}, which has no save_pretrained. Train a transformers model "
            "(hf:NAME, or a factory returning one), or drop --save-format hf.",
            argument="save_format",
        )
    return wanted == "hf"


def _save_hf(model: torch.nn.Module, out: Path, tokenizer: Any = None) -> str:
    """Write ``out/hf`` with ``save_pretrained``: the config, the fp32 weights of
    ``out/model.safetensors`` (the Trainer's full, unsharded copy) and the tokenizer when the
    model has one; return the summary's note.

    Raises:
        StorageError: the folder cannot be written.
    """
    from safetensors.torch import load_file

    weights = load_file(out / "model.safetensors")
    target = out / "hf"
    config = getattr(model, "config", None)
    try:
        if config is not None:  # the weights written are fp32 (torch_dtype before 4.56)
            setattr(config, "dtype" if hasattr(config, "dtype") else "torch_dtype", torch.float32)
        cast(Any, model).save_pretrained(target, state_dict=weights, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(target)
    except OSError as exc:
        raise StorageError.from_os_error(
            exc, str(target), "Training finished and model.safetensors was written."
        ) from None
    held = "its tokenizer" if tokenizer is not None else "no tokenizer: the model has none"
    return f"Hugging Face folder {target} (config, fp32 weights; {held})"


def _required(item: Any) -> bool:
    return item.default is MISSING and item.default_factory is MISSING


def _empty(annotation: Any) -> Any:
    """The empty value of a field of ``annotation`` (a string under postponed annotations)."""
    text = str(annotation)
    if "None" in text:
        return None
    return {"int": 0, "float": math.nan}.get(text, "")


def _train(
    config: TrainConfig,
    callbacks: Sequence[Callback | Callable[[StepMetrics], None]],
    corpus: ByteCorpus | ModelData,
    mode: PrecisionMode,
    plan: RunPlan,
    digest: Callable[[], str],
) -> TrainSummary:
    evaluation = _evaluation(config, corpus)  # before the seed: a factory may reseed
    torch.manual_seed(config.seed)
    model: torch.nn.Module
    loss_fn = None
    if isinstance(corpus, ModelData):
        model, loss_fn = corpus.built.model, corpus.built.loss_fn
        dataset: Any = corpus.dataset
        tokens_per_sample = corpus.tokens_per_sample
    else:
        model = GPT(
            GPTConfig(
                vocab_size=corpus.vocab_size,
                block_size=config.seq_len,
                n_layer=config.n_layer,
                n_head=config.n_head,
                n_embd=config.n_embd,
            )
        )
        dataset = CorpusWindows(corpus, config.seq_len)
        tokens_per_sample = config.seq_len
    out = Path(config.out) if config.out else None
    scaler = None
    if mode.policy.uses_scaler:
        scaler = LossScaler(init_scale=config.init_scale, growth_interval=config.growth_interval)
    parts: dict[str, Any] = {}

    def make_optimizer(params: Any) -> torch.optim.Optimizer:
        params = list(params)
        parts["optimizer"] = torch.optim.AdamW(
            params, lr=config.lr, weight_decay=config.weight_decay, fused=_fused_adamw(params)
        )
        return parts["optimizer"]

    def make_scheduler(opt: torch.optim.Optimizer) -> Any:
        parts["scheduler"] = torch.optim.lr_scheduler.LambdaLR(opt, _warmup(config.warmup_steps))
        return parts["scheduler"]

    keeps = config.checkpoint_every or plan.resume or config.keep_best
    checkpoints = out / "checkpoints" if out and keeps else None
    if config.keep_last and checkpoints is None:
        raise ConfigurationError(
            "--keep-last: applies to the checkpoints, and this run writes none. Add "
            "--checkpoint-every N, or drop --keep-last."
        )
    checkpoint = None
    if checkpoints is not None:
        checkpoint = CheckpointConfig(
            checkpoints,
            every=config.checkpoint_every or (evaluation.every if evaluation else None),
            keep_last=config.keep_last,
            keep_best=f"eval_{config.metric}" if config.keep_best else None,
            best_mode="max" if config.metric == "accuracy" else "min",
            resume=plan.resume,
            allow_precision_change=config.allow_precision_change,
            run_config=run_record(config, digest()),
        )
    trainer = Trainer(
        model,
        make_optimizer,
        scheduler=make_scheduler,
        loss_fn=loss_fn,
        max_steps=config.steps,
        precision=mode,
        device=mode.policy.device,
        grad_accum_steps=config.grad_accum,
        max_grad_norm=config.max_grad_norm,
        batch_size=config.batch_size,
        seed=config.seed,
        checkpoint=checkpoint,
        eval=evaluation,
        compile=CompileConfig(enabled=config.compile, mode=config.compile_mode),
        distributed=DistributedConfig(
            strategy=cast(Strategy, config.strategy),  # TrainConfig.validate checked it
            timeout_s=config.dist_timeout,
        ),
        handle_signals=True,
        callbacks=[
            *(c if isinstance(c, Callback) else _Forward(c) for c in callbacks),
            *_loggers(config, out),
            *([NonFiniteMonitor(strict=True)] if config.detect_nonfinite else []),
            *([_ApplyLr(config.lr, parts)] if plan.saved_lr is not None else []),
        ],
        keep_fp32=config.keep_fp32,
        logging=LoggingConfig(
            log_every=config.log_every,
            metrics_file=out / "metrics.jsonl" if out else None,
            tokens_per_sample=tokens_per_sample,
            progress_bar=False,  # the caller passes its own display as a callback
            console=False,  # and prints its own summary
        ),
        final_weights=out / "model.safetensors" if out else None,
        scaler=scaler,
    )
    with trainer:  # releases the process group it joined
        result = trainer.fit(dataset)
    summary = TrainSummary(
        result=result,
        data=corpus.source,
        parameters=sum(p.numel() for p in model.parameters()),
        out=str(out) if out else None,
        notes=[*plan.notes, *result.notes],
        config=config.to_dict(),
    )
    if out and trainer.is_main and _saves_hf(config, model):
        tokenizer = corpus.built.tokenizer if isinstance(corpus, ModelData) else None
        summary.notes.append(_save_hf(model, out, tokenizer))
    if out and trainer.is_main:
        try:
            write_json(out / "summary.json", summary.to_dict())
        except OSError as exc:
            raise StorageError.from_os_error(
                exc,
                str(out / "summary.json"),
                "Training finished and model.safetensors was written; the summary is also in "
                "the output above.",
            ) from None
    return summary

"""``train``: the built-in GPT trained end to end on :class:`~ampkit.Trainer`.

This is the functional core of ``ampkit train``: it takes a :class:`TrainConfig`, reports each
logged step to callbacks and returns a :class:`TrainSummary`. It prints nothing; the command
line draws the progress bar and the summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ampkit.callbacks import Callback, NonFiniteMonitor, TensorBoard
from ampkit.corpus import CorpusWindows, load_corpus
from ampkit.distributed import launched_world_size
from ampkit.errors import ConfigurationError
from ampkit.metrics import StepMetrics
from ampkit.models import GPT, GPTConfig
from ampkit.trainer import Trainer

__all__ = ["TrainConfig", "TrainSummary", "train"]


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Settings of one ``ampkit train`` run. Field docs say where each takes effect.

    Attributes:
        precision: ``auto``/``fp32``/``fp16``/``bf16`` (or alias); resolved once, at start.
        device: ``cpu``, ``cuda``, ``cuda:N``; None picks CUDA when available.
        steps: optimizer steps to run (each is ``grad_accum`` micro-batches).
        batch_size: sequences per micro-batch (per process).
        seq_len: tokens per sequence; also the model's context length.
        grad_accum: micro-batches accumulated per optimizer step.
        max_grad_norm: clip the unscaled gradient norm to this; None disables clipping.
        lr: peak AdamW learning rate, reached after ``warmup_steps`` linear warm-up steps.
        warmup_steps: linear warm-up length in optimizer steps (the scheduler advances only
            on steps that really updated the weights).
        weight_decay: AdamW decoupled weight decay.
        seed: seeds the model initialisation and the batch sampler.
        data: a UTF-8 text file to train on; None uses the built-in standard-library corpus.
        out: folder for ``metrics.jsonl``, ``summary.json`` and ``model.safetensors``.
        log_every: write a metrics row (and sync the GPU once) every this many steps.
        n_layer, n_head, n_embd: shape of the built-in GPT.
        init_scale, growth_interval: loss-scaler settings, used only for fp16.
        checkpoint_every: write ``out/checkpoints/step-N`` every N steps (needs ``out``).
        keep_last: keep only the newest N checkpoints.
        resume: ``auto`` (newest valid checkpoint in ``out/checkpoints``) or a checkpoint path.
        compile: ``torch.compile`` the model.
        compile_mode: ``torch.compile`` mode (``reduce-overhead``: CUDA graphs).
        strategy: ``auto`` (DDP under torchrun), ``ddp``, ``fsdp`` or ``none``.
        keep_fp32: module names of the GPT to run in fp32 under autocast.
        detect_nonfinite: stop at the first inf/NaN and name the module that made it.
    """

    precision: str = "auto"
    device: str | None = None
    steps: int = 300
    batch_size: int = 16
    seq_len: int = 128
    grad_accum: int = 1
    max_grad_norm: float | None = 1.0
    lr: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 0.1
    seed: int = 0
    data: str | None = None
    out: str | None = None
    log_every: int = 10
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    init_scale: float = 2.0**16
    growth_interval: int = 2000
    checkpoint_every: int | None = None
    keep_last: int | None = None
    resume: str | None = None
    compile: bool = False
    compile_mode: str | None = None
    strategy: str = "auto"
    keep_fp32: tuple[str, ...] = ()
    detect_nonfinite: bool = False

    def validate(self) -> None:
        """Raise one :class:`ConfigurationError` listing every invalid setting.

        Flags are named as on the command line (``--steps``), since that is where users meet them.
        """
        problems = [
            f"--{name.replace('_', '-')} must be {rule}, got {value!r}"
            for name, value, ok, rule in [
                ("steps", self.steps, self.steps >= 1, "an integer >= 1"),
                ("batch_size", self.batch_size, self.batch_size >= 1, "an integer >= 1"),
                ("seq_len", self.seq_len, self.seq_len >= 1, "an integer >= 1"),
                ("grad_accum", self.grad_accum, self.grad_accum >= 1, "an integer >= 1"),
                ("lr", self.lr, math.isfinite(self.lr) and self.lr > 0, "a positive number"),
                ("warmup_steps", self.warmup_steps, self.warmup_steps >= 0, "an integer >= 0"),
                ("log_every", self.log_every, self.log_every >= 1, "an integer >= 1"),
                (
                    "max_grad_norm",
                    self.max_grad_norm,
                    self.max_grad_norm is None or self.max_grad_norm > 0,
                    "a positive number",
                ),
                (
                    "n_embd",
                    self.n_embd,
                    self.n_embd >= 1 and self.n_embd % max(self.n_head, 1) == 0,
                    f"a positive multiple of --n-head ({self.n_head})",
                ),
            ]
            if not ok
        ]
        if (self.checkpoint_every or self.resume or self.keep_last) and not self.out:
            problems.append("--checkpoint-every, --keep-last and --resume need --out DIR")
        if problems:
            raise ConfigurationError("invalid settings: " + "; ".join(problems) + ".")


@dataclass(frozen=True)
class TrainSummary:
    """What a run did, for the end-of-run summary and ``summary.json``."""

    precision: str
    reason: str
    device: str
    data: str
    parameters: int
    steps: int
    skipped_steps: int
    final_loss: float
    final_scale: float
    tokens_per_s: float
    wall_s: float
    peak_memory_bytes: int
    peak_memory_kind: str
    out: str | None = None
    world_size: int = 1
    resumed_from: str | None = None
    notes: list[str] = field(default_factory=list)
    scale_history: list[tuple[int, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values."""
        return asdict(self)


def _warmup(warmup_steps: int) -> Callable[[int], float]:
    return lambda done: min(1.0, (done + 1) / warmup_steps) if warmup_steps else 1.0


class _Forward(Callback):
    """Hands each logged step to a plain function (the CLI's progress display)."""

    def __init__(self, function: Callable[[StepMetrics], None]) -> None:
        self.function = function

    def on_log(self, trainer: Trainer, metrics: StepMetrics) -> None:
        if trainer.is_main:
            self.function(metrics)


def train(
    config: TrainConfig,
    callbacks: Sequence[Callback | Callable[[StepMetrics], None]] = (),
) -> TrainSummary:
    """Train the built-in GPT as ``config`` says on :class:`~ampkit.Trainer`.

    ``callbacks`` are :class:`~ampkit.Callback` objects, or plain functions that get every
    logged step's :class:`StepMetrics` (rank 0 only). Under ``torchrun`` every process runs
    this; ``batch_size`` is per process.

    Raises:
        ConfigurationError: invalid settings, or a precision the device cannot run.
        DataError: the data file is missing, empty, binary, or too small for the batch.
        CheckpointError: ``resume`` names a missing, corrupt or mismatched checkpoint.
        NonFiniteTrainingError: fp16 gradients stayed inf/NaN at the minimum loss scale.
    """
    config.validate()
    corpus = load_corpus(config.data)
    world = launched_world_size()
    corpus.validate(config.batch_size, config.seq_len, world_size=world)
    torch.manual_seed(config.seed)
    model = GPT(
        GPTConfig(
            vocab_size=corpus.vocab_size,
            block_size=config.seq_len,
            n_layer=config.n_layer,
            n_head=config.n_head,
            n_embd=config.n_embd,
        )
    )
    out = Path(config.out) if config.out else None
    trainer = Trainer(
        model,
        lambda params: torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay),
        scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, _warmup(config.warmup_steps)),
        max_steps=config.steps,
        precision=config.precision,
        device=config.device,
        grad_accum_steps=config.grad_accum,
        max_grad_norm=config.max_grad_norm,
        batch_size=config.batch_size,
        seed=config.seed,
        checkpoint_dir=out / "checkpoints"
        if out and (config.checkpoint_every or config.resume)
        else None,
        checkpoint_every=config.checkpoint_every,
        keep_last=config.keep_last,
        resume=config.resume,
        compile=config.compile,
        compile_mode=config.compile_mode,
        strategy=config.strategy,
        callbacks=[
            *(c if isinstance(c, Callback) else _Forward(c) for c in callbacks),
            *([TensorBoard(out / "tensorboard")] if out and TensorBoard.available() else []),
            *([NonFiniteMonitor(strict=True)] if config.detect_nonfinite else []),
        ],
        keep_fp32=config.keep_fp32,
        log_every=config.log_every,
        metrics_file=out / "metrics.jsonl" if out else None,
        final_weights=out / "model.safetensors" if out else None,
        tokens_per_sample=config.seq_len,
        scaler_options={"init_scale": config.init_scale, "growth_interval": config.growth_interval},
    )
    result = trainer.fit(CorpusWindows(corpus, config.seq_len))
    summary = TrainSummary(
        precision=result.precision,
        reason=result.reason,
        device=result.device,
        world_size=result.world_size,
        data=corpus.source,
        parameters=sum(p.numel() for p in model.parameters()),
        steps=result.steps,
        skipped_steps=result.skipped_steps,
        final_loss=result.final_loss,
        final_scale=result.final_scale,
        tokens_per_s=result.tokens_per_s or 0.0,
        wall_s=result.wall_s,
        peak_memory_bytes=result.peak_memory_bytes,
        peak_memory_kind=result.peak_memory_kind,
        out=str(out) if out else None,
        resumed_from=result.resumed_from,
        notes=result.notes,
        scale_history=result.scale_history,
    )
    if out and trainer.is_main:
        (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return summary

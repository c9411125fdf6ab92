"""``train``: the built-in GPT trained end to end on :class:`~ampkit.Trainer`.

This is the functional core of ``ampkit train``: it takes a :class:`TrainConfig`, reports each
logged step to callbacks and returns a :class:`TrainSummary`. It prints nothing; the command
line draws the progress bar and the summary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ampkit._files import write_json
from ampkit.gpt.config import TrainConfig
from ampkit.gpt.corpus import CorpusWindows, load_corpus
from ampkit.gpt.model import GPT, GPTConfig
from ampkit.policy import resolve_precision
from ampkit.scaler import LossScaler
from ampkit.trainer.callbacks import Callback, NonFiniteMonitor, TensorBoard, TrainerView
from ampkit.trainer.distributed import launched_world_size
from ampkit.trainer.metrics import StepMetrics
from ampkit.trainer.trainer import Trainer

__all__ = ["TrainConfig", "TrainSummary", "train"]


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
    config: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values."""
        return asdict(self)


def _warmup(warmup_steps: int) -> Callable[[int], float]:
    return lambda done: min(1.0, (done + 1) / warmup_steps) if warmup_steps else 1.0


class _Forward(Callback):
    """Hands each logged step to a plain function (the CLI's progress display)."""

    def __init__(self, function: Callable[[StepMetrics], None]) -> None:
        self.function = function

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
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
    scaler = None
    if resolve_precision(config.precision, config.device).uses_scaler:
        scaler = LossScaler(init_scale=config.init_scale, growth_interval=config.growth_interval)
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
        scaler=scaler,
        update_compensation=config.update_compensation,
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
        config=config.to_dict(),
    )
    if out and trainer.is_main:
        write_json(out / "summary.json", summary.to_dict())
    return summary

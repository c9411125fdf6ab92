"""``train``: the built-in GPT trained end to end with :class:`~ampkit.MixedPrecision`.

This is the functional core of ``ampkit train``: it takes a :class:`TrainConfig`, reports each
logged step to callbacks and returns a :class:`TrainSummary`. It prints nothing; the command
line draws the progress bar and the summary.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ampkit.corpus import load_corpus
from ampkit.engine import MixedPrecision
from ampkit.errors import ConfigurationError
from ampkit.metrics import MetricsWriter, StepMetrics, peak_memory, reset_peak_memory
from ampkit.models import GPT, GPTConfig

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
    scale_history: list[tuple[int, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values."""
        return asdict(self)


def _warmup(warmup_steps: int) -> Callable[[int], float]:
    return lambda done: min(1.0, (done + 1) / warmup_steps) if warmup_steps else 1.0


def train(
    config: TrainConfig, callbacks: Sequence[Callable[[StepMetrics], None]] = ()
) -> TrainSummary:
    """Train the built-in GPT as ``config`` says; call each callback on every logged step.

    Raises:
        ConfigurationError: invalid settings, or a precision the device cannot run.
        DataError: the data file is missing, empty, binary, or too small for the batch.
        NonFiniteTrainingError: fp16 gradients stayed inf/NaN at the minimum loss scale.
    """
    config.validate()
    mp = MixedPrecision(
        config.precision,
        config.device,
        grad_accum_steps=config.grad_accum,
        max_grad_norm=config.max_grad_norm,
        init_scale=config.init_scale,
        growth_interval=config.growth_interval,
    )
    corpus = load_corpus(config.data)
    corpus.validate(config.batch_size, config.seq_len)
    device = mp.device
    torch.manual_seed(config.seed)
    model = GPT(
        GPTConfig(
            vocab_size=corpus.vocab_size,
            block_size=config.seq_len,
            n_layer=config.n_layer,
            n_head=config.n_head,
            n_embd=config.n_embd,
        )
    ).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup(config.warmup_steps))
    out = Path(config.out) if config.out else None
    tokens_per_step = config.batch_size * config.seq_len * config.grad_accum
    reset_peak_memory(device)
    start = interval_start = time.perf_counter()
    loss_sum = torch.zeros((), device=device)
    micro_batches = 0
    last_loss = math.nan
    with mp, MetricsWriter(out / "metrics.jsonl" if out else None) as writer:
        for step in range(config.steps):
            for micro in range(config.grad_accum):
                x, y = corpus.batch(
                    step * config.grad_accum + micro,
                    config.batch_size,
                    config.seq_len,
                    seed=config.seed,
                    device=device,
                )
                with mp.accumulate(model):
                    with mp.autocast():
                        _, loss = model(x, y)
                    mp.backward(loss)
                loss_sum += loss.detach().float()
                micro_batches += 1
            result = mp.step(optimizer, scheduler)
            done = step + 1
            if done % config.log_every and done != config.steps:
                continue
            last_loss = float(loss_sum / micro_batches)  # syncs the GPU once per log interval
            elapsed = time.perf_counter() - interval_start
            steps_in_interval = micro_batches // config.grad_accum
            metrics = StepMetrics(
                step=done,
                loss=last_loss,
                lr=scheduler.get_last_lr()[0],
                scale=result.scale,
                skipped=result.skipped,
                grad_norm=result.grad_norm,
                step_time_ms=1000 * elapsed / steps_in_interval,
                tokens_per_s=tokens_per_step * steps_in_interval / elapsed,
            )
            writer.write(metrics)
            for callback in callbacks:
                callback(metrics)
            loss_sum.zero_()
            micro_batches = 0
            interval_start = time.perf_counter()
    wall = time.perf_counter() - start
    memory, memory_kind = peak_memory(device)
    stats = mp.stats
    summary = TrainSummary(
        precision=mp.policy.precision,
        reason=mp.policy.reason,
        device=str(device),
        data=corpus.source,
        parameters=sum(p.numel() for p in model.parameters()),
        steps=stats.steps,
        skipped_steps=stats.skipped_steps,
        final_loss=last_loss,
        final_scale=stats.scale,
        tokens_per_s=tokens_per_step * config.steps / wall,
        wall_s=wall,
        peak_memory_bytes=memory,
        peak_memory_kind=memory_kind,
        out=str(out) if out else None,
        scale_history=list(stats.scale_history),
    )
    if out:
        _save_outputs(out, model, summary)
    return summary


def _save_outputs(out: Path, model: torch.nn.Module, summary: TrainSummary) -> None:
    from safetensors.torch import save_file

    weights = {k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(out / "model.safetensors"), metadata={"precision": summary.precision})
    (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2) + "\n")

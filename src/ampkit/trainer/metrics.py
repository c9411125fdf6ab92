"""Per-step training metrics: the logged row, the throughput bookkeeping behind it, and
peak-memory readings."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.distributed as dist

from ampkit.precision.devices import peak_memory, reset_peak_memory
from ampkit.precision.modes import check_declared, declared_value

__all__ = ["StepMetrics", "Throughput", "peak_memory", "reset_peak_memory"]

#: Written only when set.
_OPTIONAL = ("eval_loss", "eval_metrics", "precision_change")


@dataclass(frozen=True)
class StepMetrics:
    """One logged optimizer step (averages over the steps since the previous log line).

    Attributes:
        step: optimizer steps done so far (1-based).
        loss: mean training loss over the logged interval's micro-batches.
        lr: learning rate of the first parameter group after this step.
        scale: loss scale for the next step (1.0 without loss scaling).
        skipped: whether this step was skipped (inf/NaN gradients).
        grad_norm: unscaled gradient norm before clipping (None when clipping is off).
        step_time_ms: mean wall time per step over the logged interval.
        samples_per_s: samples (over all ranks) per second over the logged interval.
        tokens_per_s: tokens per second, when the run knows its tokens per sample.
        eval_loss: mean loss over ``eval_data`` at this step (``Trainer(eval=EvalConfig(...))``);
            left out of the JSON line when not evaluated.
        precision_change: ``"fp16 -> bf16"`` on the first row after a resume that changed
            the precision on purpose; left out of the JSON line otherwise.
        eval_metrics: each ``EvalConfig.metrics`` value at this step (name -> value), written
            as ``eval_<name>`` keys of the JSON line; None when not evaluated.
        mode_metrics: what the precision mode measured at this step, by the names its class
            declares (``PrecisionMode.metric_fields``; bf16-true: the shares of lost weight and
            state updates), written as keys of the JSON line. Each declared name is also an
            attribute of the row, None when the run's mode did not set it.
    """

    step: int
    loss: float
    lr: float
    scale: float
    skipped: bool
    grad_norm: float | None
    step_time_ms: float
    samples_per_s: float
    tokens_per_s: float | None = None
    eval_loss: float | None = None
    precision_change: str | None = None
    eval_metrics: dict[str, float] | None = None
    mode_metrics: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_declared(self, self.mode_metrics, "metric")

    def __getattr__(self, name: str) -> Any:
        return declared_value(self, self.__dict__.get("mode_metrics", {}), name, "metric")

    def flat(self) -> dict[str, object]:
        """The row's keys as ``metrics.jsonl`` has them: unset optional values left out, each
        eval metric as ``eval_<name>``, the mode's metrics as their own keys."""
        row: dict[str, object] = {}
        for item in fields(self):
            key, value = item.name, getattr(self, item.name)
            if key in _OPTIONAL and value is None:
                continue
            if key == "eval_metrics":
                row.update((f"eval_{name}", metric) for name, metric in value.items())
            elif key == "mode_metrics":
                row.update(value)
            else:
                row[key] = value
        return row

    def to_json(self) -> str:
        """One JSON line; non-finite numbers become null so every line parses as strict JSON.
        The mode's metrics are written only under the mode that measures them."""
        row = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in self.flat().items()
        }
        return json.dumps(row, separators=(",", ":"))


class Throughput:
    """Loss and samples between two logged steps, turned into one :class:`StepMetrics` row.

    ``add`` is called per micro-batch and never synchronises with the GPU (the loss is summed
    on the device); ``row`` synchronises once (and all-reduces the loss across ranks when
    ``world_size > 1``) and starts the next interval.

    Args:
        device: where the loss lives.
        world_size: processes in the job; samples are counted over all of them.
        grad_accum_steps: micro-batches per optimizer step.
        tokens_per_sample: tokens in one sample, for tokens/s (None: not reported).
    """

    def __init__(
        self,
        device: torch.device,
        *,
        world_size: int = 1,
        grad_accum_steps: int = 1,
        tokens_per_sample: int | None = None,
    ) -> None:
        self.world_size, self.grad_accum_steps = world_size, grad_accum_steps
        self.tokens_per_sample = tokens_per_sample
        self._loss_sum = torch.zeros((), device=device)
        self._micro = self._samples = self.samples_total = 0
        self.started = self._interval_start = time.perf_counter()
        self.last_loss = math.nan

    def add(self, loss: torch.Tensor, samples: int) -> None:
        """Count one micro-batch of ``samples`` samples (per process) and its loss."""
        self._loss_sum += loss.detach().float()
        self._micro += 1
        self._samples += samples * self.world_size

    def row(
        self, *, step: int, lr: float, scale: float, skipped: bool, grad_norm: float | None
    ) -> StepMetrics:
        """The metrics of the interval that ends at ``step``; starts the next interval."""
        if self.world_size > 1:
            dist.all_reduce(self._loss_sum)
        self.last_loss = float(self._loss_sum) / (self._micro * self.world_size)
        elapsed = time.perf_counter() - self._interval_start
        steps = max(1, self._micro // self.grad_accum_steps)
        per_s = self._samples / elapsed if elapsed > 0 else 0.0
        metrics = StepMetrics(
            step=step,
            loss=self.last_loss,
            lr=lr,
            scale=scale,
            skipped=skipped,
            grad_norm=grad_norm,
            step_time_ms=1000 * elapsed / steps,
            samples_per_s=per_s,
            tokens_per_s=per_s * self.tokens_per_sample if self.tokens_per_sample else None,
        )
        self.samples_total += self._samples
        self._loss_sum.zero_()
        self._micro = self._samples = 0
        self._interval_start = time.perf_counter()
        return metrics

    def interval_loss_finite(self) -> bool:
        """Whether the loss summed since the last row is finite. One GPU sync; collective
        when ``world_size > 1`` (every rank gets the same answer)."""
        total = self._loss_sum.clone()
        if self.world_size > 1:
            dist.all_reduce(total)
        return bool(torch.isfinite(total))

    def restart_interval(self) -> None:
        """Start the current interval now (time spent outside training, such as an
        evaluation, is then not counted against the next logged step's throughput)."""
        self._interval_start = time.perf_counter()

    @property
    def wall_s(self) -> float:
        """Seconds since the bookkeeping started."""
        return time.perf_counter() - self.started

    def overall(self) -> tuple[float, float]:
        """``(wall seconds, samples per second)`` over all logged intervals so far."""
        wall = self.wall_s
        return wall, (self.samples_total / wall if wall > 0 else 0.0)

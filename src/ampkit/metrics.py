"""Per-step training metrics and where they go (``metrics.jsonl``), plus peak-memory readings."""

from __future__ import annotations

import json
import math
import resource
import sys
from dataclasses import asdict, dataclass

import torch

__all__ = ["StepMetrics", "peak_memory", "reset_peak_memory"]


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

    def to_json(self) -> str:
        """One JSON line; non-finite numbers become null so every line parses as strict JSON."""
        row = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in asdict(self).items()
        }
        return json.dumps(row, separators=(",", ":"))


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window on CUDA (the CPU's peak RSS cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """Peak memory in bytes and what was measured.

    CUDA: ``torch.cuda.max_memory_allocated`` (tensors only, since the last reset).
    CPU: the process's peak resident set size (everything the process ever held).
    """
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "CUDA max_memory_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return rss * scale, "process peak RSS"

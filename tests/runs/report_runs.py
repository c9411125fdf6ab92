"""Run folders for the report tests: real short runs of the built-in job, and synthetic ones
whose noise is known in closed form."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: The built-in job, small enough for a few seconds a run on a 2-core CPU.
TINY = {
    "steps": 40,
    "log_every": 1,
    "n_layer": 1,
    "n_embd": 32,
    "seq_len": 32,
    "batch_size": 8,
    "device": "cpu",
    "warmup_steps": 0,
}


def write_run(
    folder: Path,
    losses: Sequence[float],
    *,
    precision: str = "fp32",
    seed: int = 0,
    skipped: Sequence[int] = (),
    extra: dict[str, object] | None = None,
) -> Path:
    """A run folder as ``ampkit train --out`` writes it: one row per step, and a summary."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for step, loss in enumerate(losses, start=1):
        row = {
            "step": step,
            "loss": None if not np.isfinite(loss) else float(loss),
            "lr": 1e-3,
            "scale": 2.0**16 if precision == "fp16" else 1.0,
            "skipped": step in skipped,
            "grad_norm": 1.0,
            "step_time_ms": 10.0,
            "samples_per_s": 100.0,
            "tokens_per_s": 3200.0,
        }
        lines.append(json.dumps(row))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    config = {
        "precision": precision,
        "seed": seed,
        "batch_size": 8,
        "seq_len": 32,
        "out": str(folder),
    }
    config.update(extra or {})
    summary = {
        "precision": precision,
        "reason": f"{precision} was requested explicitly.",
        "device": "cpu",
        "steps": len(losses),
        "skipped_steps": len(skipped),
        "final_loss": float(losses[-1]),
        "wall_s": 1.5,
        "peak_memory_bytes": 2**27,
        "peak_memory_kind": "process peak RSS",
        "world_size": 1,
        "config": config,
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def noisy_curve(seed: int, steps: int = 200, shift: float = 0.0, noise: float = 0.05) -> np.ndarray:
    """An exponential decay to 2.0 plus white noise of std ``noise``, shifted by ``shift``."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    return 2.0 + 3.0 * np.exp(-t / 40) + shift + rng.normal(0.0, noise, steps)

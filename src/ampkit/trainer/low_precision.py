"""What the Trainer adds for fp8 and bf16-true: the default of ``compile``, the fp8 plan from
the first batch, and the lost-updates metric (functions the Trainer calls; no state here)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ampkit._tree import to_device
from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.precision.engine import MixedPrecision
from ampkit.trainer.distributed import DistContext
from ampkit.trainer.metrics import StepMetrics

__all__ = [
    "compile_default",
    "example_batch",
    "keep_islands_fp32",
    "plan_fp8",
    "with_lost_updates",
]


def compile_default(mp: MixedPrecision, compile: bool | None) -> bool:
    """``compile=None``: on for fp8 on CUDA (eager fp8 is slower than bf16), else off.

    Warns:
        PrecisionWarning: ``compile=False`` under fp8 on CUDA.
    """
    fp8_gpu = mp.policy.precision == "fp8" and mp.device.type == "cuda"
    if compile is None:
        return fp8_gpu
    if fp8_gpu and not compile:
        warnings.warn(
            "Trainer: compile=False under fp8 on CUDA: eager fp8 runs separate cast and scale "
            "kernels and is slower than bf16. Leave compile at its default (on for fp8), or "
            "train in bf16.",
            PrecisionWarning,
            stacklevel=3,
        )
    return compile


def keep_islands_fp32(mp: MixedPrecision, model: nn.Module, islands: tuple[str, ...]) -> None:
    """bf16-true: modules the user runs in fp32 (``keep_fp32`` islands) keep fp32 parameters
    too, on top of ``bf16_true_keep_fp32`` (or its defaults); an island of bf16 weights would
    meet fp32 inputs."""
    from ampkit.precision.bf16_true.casting import default_keep_fp32

    keep = mp.bf16_true_keep_fp32
    base = default_keep_fp32(model) if keep is None else list(keep)
    mp.bf16_true_keep_fp32 = [*base, *(n for n in islands if n not in base)]


def example_batch(data: Any, batch_size: int | None) -> Any:
    """One batch of ``fit``'s data: the first ``batch_size`` samples of a Dataset
    (collated), or the first batch of an iterable.

    Raises:
        ConfigurationError: the data holds no batch.
    """
    if isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__"):
        count = min(batch_size or 1, len(data))
        if count:
            return torch.utils.data.default_collate([data[i] for i in range(count)])
    else:
        for batch in data:
            return batch
    raise ConfigurationError("Trainer: the training data produced no batch to plan fp8 on.")


def plan_fp8(
    mp: MixedPrecision,
    model: nn.Module,
    train_data: Any,
    *,
    batch_size: int | None,
    loss_fn: Any,
    ctx: DistContext,
    strategy: str,
    keep_fp32: tuple[str, ...] = (),
) -> str | None:
    """Set ``mp.fp8_plan`` (measured on the first batch unless one was given; rank 0's plan
    is broadcast so every rank converts the same layers) and the FSDP2 fp8 all-gather switch
    (tensorwise only). Layers inside ``keep_fp32`` islands are left out of the plan (their
    hooks live on the original modules). Returns a note for the run summary.
    """
    from ampkit.precision.fp8.planning import fp8_plan

    mp.fp8_fsdp_all_gather = (
        strategy == "fsdp" and ctx.distributed and mp.policy.fp8_recipe == "tensorwise"
    )
    if mp.fp8_plan is None and train_data is not None:
        batch = to_device(example_batch(train_data, batch_size), mp.device)
        measured = fp8_plan(
            model, batch, loss_fn=loss_fn, recipe=mp.policy.fp8_recipe or "tensorwise"
        )
        if ctx.distributed:
            shared = [measured]
            dist.broadcast_object_list(shared, src=0)
            measured = shared[0]
        mp.fp8_plan = measured
    plan = mp.fp8_plan
    if plan is None:
        return None
    if keep_fp32:
        plan = mp.fp8_plan = plan.excluding(keep_fp32, "kept in fp32 (keep_fp32)")
    how = "measured" if plan.measured else "shape rules and torchao's size prior"
    return (
        f"fp8 ({plan.recipe}): {len(plan.selected)} of {len(plan.layers)} Linear layers "
        f"converted ({how})"
    )


def with_lost_updates(
    metrics: StepMetrics,
    optimizer: torch.optim.Optimizer,
    names: dict[int, str],
    warn: bool,
) -> tuple[StepMetrics, bool]:
    """Add the step's lost-update share (bf16-true's optimizer measured it); warn if
    ``warn`` and it is alarming. Returns the row and whether a warning was given.

    Warns:
        PrecisionWarning: more than ``LOST_UPDATES_WARN_AT`` of the updates were lost.
    """
    read = getattr(optimizer, "lost_updates", None)
    lost = read(names) if callable(read) else None
    if lost is None:
        return metrics, False
    warned = False
    if warn and lost.alarming:
        warned = True
        worst = sorted(lost.per_tensor.items(), key=lambda kv: -kv[1])[:3]
        warnings.warn(
            f"Trainer: at step {metrics.step}, {100 * lost.fraction:.1f}% of the intended "
            f"weight updates were rounded away by the bf16 weights (update_compensation="
            f"{lost.compensation!r}; worst: "
            + ", ".join(f"{n} {100 * v:.0f}%" for n, v in worst)
            + "). Use update_compensation='kahan' or 'stochastic', or keep these modules in "
            "fp32 (bf16_true_keep_fp32).",
            PrecisionWarning,
            stacklevel=5,
        )
    return replace(metrics, lost_updates=lost.fraction), warned

"""Resuming on another number of processes: the data position in samples, and the RNG.

The loop counters count micro-batches *per process* (:class:`TrainerState`); a checkpoint also
records the position in samples (:func:`data_position`), which does not depend on how many
processes consumed them. The Trainer's sampler gives rank ``r`` of ``W`` every ``W``-th sample
of the epoch's order, so after ``S`` samples of an epoch every world size has consumed the same
first ``S`` samples of that order, and a run on ``W'`` processes of ``b'`` samples each
continues at micro-batch ``S / (b' * W')`` (:func:`reshard_counters`).

RNG states are per process: rank ``r`` takes the saved state of rank ``r`` where there is one;
a rank without one is re-seeded from ``(seed, step, rank)``; both are noted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampkit.errors import CheckpointError
from ampkit.trainer.checkpointing.rng import reseed, set_rng_state

if TYPE_CHECKING:
    from ampkit.precision.engine import MixedPrecision
    from ampkit.trainer.state import TrainerState

__all__ = ["data_position", "reshard_counters"]


def data_position(
    counters: TrainerState, engine: MixedPrecision, batch_size: int | None, world_size: int
) -> dict[str, Any]:
    """Where the data stands, in samples (None where the Trainer does not build the loader,
    so the samples per micro-batch are not known)."""
    global_batch = batch_size * world_size if batch_size else None
    return {
        "batch_size": batch_size,
        "world_size": world_size,
        "epoch": counters.epoch,
        "samples_in_epoch": counters.batch_in_epoch * global_batch if global_batch else None,
        "samples_consumed": (
            counters.step * engine.grad_accum_steps * global_batch if global_batch else None
        ),
    }


def _ranks(first: int, last: int) -> str:
    return f"rank {first}" if first == last else f"ranks {first}-{last}"


def reshard_counters(
    counters: TrainerState,
    data: dict[str, Any] | None,
    rng_states: list[Any],
    *,
    path: Path,
    batch_size: int | None,
    rank: int,
    world_size: int,
    seed: int,
) -> list[str]:
    """Move the restored counters to this world size and restore or re-seed this rank's RNG;
    return the notes for ``FitResult``.

    Raises:
        CheckpointError: the checkpoint has no data position in samples (an older ampkit, or
            batches the Trainer did not load), this run does not build the loader
            (``batch_size`` is None), or the samples are not whole micro-batches here.
    """
    saved_world = len(rng_states)
    samples = (data or {}).get("samples_in_epoch")
    if samples is None or batch_size is None:
        why = (
            "the checkpoint does not record the data position in samples"
            if samples is None
            else "this run does not build the loader (no batch_size)"
        )
        raise CheckpointError(
            f"resume: {path} was written by {saved_world} process(es) but this run has "
            f"{world_size}, and {why}, so the data position cannot be recomputed. Resume with "
            f"{saved_world} process(es), or pass a Dataset and batch_size to the Trainer."
        )
    global_batch = batch_size * world_size
    if samples % global_batch:
        raise CheckpointError(
            f"resume: {path} stopped {samples} samples into epoch {counters.epoch}, which is "
            f"not a whole number of micro-batches of {batch_size} x {world_size} processes. "
            f"Pick a batch_size whose product with the number of processes divides {samples}."
        )
    counters.batch_in_epoch = samples // global_batch
    if rank < saved_world:
        set_rng_state(rng_states[rank])
    else:
        reseed(seed, counters.step, rank)
    carried = min(saved_world, world_size)
    rng = f"RNG states of {_ranks(0, carried - 1)} carried over"
    if world_size > saved_world:
        rng += f", {_ranks(saved_world, world_size - 1)} re-seeded from (seed={seed}, step="
        rng += f"{counters.step}, rank)"
    notes = [
        f"resumed a {saved_world}-process checkpoint on {world_size} process(es): data "
        f"position recomputed from {samples} samples consumed in epoch {counters.epoch} "
        f"({counters.batch_in_epoch} micro-batches of {batch_size} per process); {rng}"
    ]
    saved_batch = (data or {}).get("batch_size")
    if saved_batch and saved_batch * saved_world != global_batch:
        notes.append(
            f"the global micro-batch changed from {saved_batch * saved_world} to "
            f"{global_batch} samples, so training continues with other step sizes"
        )
    return notes

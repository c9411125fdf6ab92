"""What a Trainer checkpoint holds, and how it is taken from and put back into the training parts.

The folder format (atomic write, manifest, verification) is :mod:`ampkit.checkpoint.folder`
and the sharded writer/reader :mod:`ampkit.checkpoint.sharded`; this module decides the contents:

* weights: the model's weights in fp32. ``full`` layout: the unwrapped model's full state dict
  (FSDP2: gathered to rank 0); ``sharded`` layout: each rank's shards, written by DCP;
* :data:`OPTIMIZER`: the optimizer's state (full layout: in ``state.pt``, FSDP2: gathered;
  sharded layout: beside the weights in DCP's files, keyed by parameter name);
* :data:`SCHEDULER`, :data:`ENGINE` (:meth:`MixedPrecision.state_dict`), :data:`TRAINER`
  (:meth:`TrainerState.state_dict`), :data:`RNG` (Python/NumPy/torch(/CUDA) RNG states of every
  rank) and :data:`DATA` (the data position in samples, so a resume on another number of
  processes can recompute it).

Saving is :class:`~ampkit.trainer.checkpointing.writer.CheckpointWriter` (collective under
torchrun), loading :func:`restore`; both work on a :class:`TrainingParts`, built once by the
Trainer's set-up, so this module never sees the Trainer itself. Resharding (a resume on another
world size) is in :mod:`~ampkit.trainer.checkpointing.reshard`, the choice of the checkpoint to
resume in :mod:`~ampkit.trainer.checkpointing.resume`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ampkit.checkpoint import folder as folder
from ampkit.checkpoint import sharded
from ampkit.errors import CheckpointError
from ampkit.precision.engine import MixedPrecision
from ampkit.precision.optimizer_state import load_optimizer_state
from ampkit.trainer.checkpointing.reshard import data_position, reshard_counters
from ampkit.trainer.checkpointing.rng import get_rng_state, set_rng_state
from ampkit.trainer.distributed import DistContext
from ampkit.trainer.state import TrainerState

__all__ = [
    "DATA",
    "ENGINE",
    "OPTIMIZER",
    "RNG",
    "FULL_STATE_KEYS",
    "SCHEDULER",
    "SHARDED_STATE_KEYS",
    "TRAINER",
    "Restored",
    "TrainingParts",
    "full_weights",
    "restore",
    "snapshot",
]

OPTIMIZER, SCHEDULER, ENGINE, TRAINER, RNG = "optimizer", "scheduler", "engine", "trainer", "rng"
DATA = "data"
#: The keys ``state.pt`` of a full checkpoint must hold, in the order they are written
#: (:data:`DATA` too since format 2).
FULL_STATE_KEYS = (OPTIMIZER, SCHEDULER, ENGINE, TRAINER, RNG)
#: The keys ``state.pt`` of a sharded checkpoint must hold (the optimizer is in DCP's files).
SHARDED_STATE_KEYS = FULL_STATE_KEYS[1:]


@dataclass
class TrainingParts:
    """Everything a checkpoint is taken from and restored into.

    Attributes:
        model: the model as the user passed it (not wrapped by DDP or compile; FSDP2 shards it
            in place, so under FSDP2 this is the sharded module).
        optimizer: the optimizer over the (wrapped) model's parameters.
        scheduler: the LR scheduler, or None.
        engine: the :class:`MixedPrecision` engine (loss-scaler state, accumulation position).
        counters: the loop counters.
        dist: where this process sits in the job.
        sharded: the model is sharded with FSDP2 (state dicts are gathered collectively).
        batch_size: samples per micro-batch per process when the Trainer builds the loader
            (None otherwise); with the world size it turns the data position into samples.
        seed: the run's seed; re-seeds the RNG of a rank whose state cannot carry over.
        run_config: the run's settings, recorded as ``config`` in every checkpoint's manifest
            (None: not recorded).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    engine: MixedPrecision
    counters: TrainerState
    dist: DistContext
    sharded: bool = False
    batch_size: int | None = None
    seed: int = 0
    run_config: dict[str, Any] | None = None


def _full_options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_weights(parts: TrainingParts) -> dict[str, torch.Tensor]:
    """The model's full (unsharded) weights in fp32 on the CPU. Collective under FSDP2 (over
    any mesh, also one the caller built: ``TrainingParts.sharded`` says so), where only rank 0
    receives them (the other ranks get an empty dict)."""
    if parts.sharded:  # DTensors: gathered, never read one by one
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        weights = cast(
            dict[str, torch.Tensor],  # a full state dict: plain tensors
            get_model_state_dict(parts.model, options=_full_options(cpu_offload=True)),
        )
    else:
        weights = parts.model.state_dict()
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in weights.items()}


def snapshot(
    parts: TrainingParts, *, full: bool = True
) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any], dict[str, Any]]:
    """Take the current step's ``(weights, state, manifest metadata)``. Collective under
    torchrun.

    Args:
        full: the full layout: the gathered weights, and the optimizer state first in
            ``state`` (:data:`FULL_STATE_KEYS`). False (the sharded layout, whose model and
            optimizer DCP writes): weights None and ``state`` without the optimizer
            (:data:`SHARDED_STATE_KEYS`).

    ``state`` also holds the scheduler, engine, counters, every rank's RNG and the data
    position; the metadata the manifest's facts about the run (precision, world size,
    strategy, data position, the run's settings).
    """
    weights: dict[str, torch.Tensor] | None = None
    state: dict[str, Any] = {}
    if full:
        weights = full_weights(parts)
        if parts.sharded:
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            state[OPTIMIZER] = get_optimizer_state_dict(
                parts.model, parts.optimizer, options=_full_options(cpu_offload=True)
            )
        else:
            state[OPTIMIZER] = parts.optimizer.state_dict()
    rng: list[dict[str, Any] | None] = [get_rng_state()]
    if parts.dist.distributed:
        rng = [None] * parts.dist.world_size
        dist.all_gather_object(rng, get_rng_state())
    data = data_position(parts.counters, parts.engine, parts.batch_size, parts.dist.world_size)
    state |= {
        SCHEDULER: parts.scheduler.state_dict() if parts.scheduler is not None else None,
        ENGINE: parts.engine.state_dict(),
        TRAINER: parts.counters.state_dict(),
        RNG: rng,
        DATA: data,
    }
    metadata = {
        "precision": parts.engine.policy.precision,
        "world_size": parts.dist.world_size,
        "strategy": "fsdp" if parts.sharded else "replicated",
        "batch_size": parts.batch_size,
        "samples_consumed": data["samples_consumed"],
        **({"config": parts.run_config} if parts.run_config is not None else {}),
    }
    return weights, state, metadata


# -- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Restored:
    """What :func:`restore` did: the checkpoint's world size, notes for ``FitResult``, and the
    checkpoint's precision when it was deliberately resumed into another one (else None)."""

    saved_world_size: int
    notes: list[str]
    changed_from: str | None = None


def _check_shapes(model: nn.Module, found: dict[str, tuple[int, ...]], path: Path) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    wrong = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
    if missing or extra or wrong:
        details = [
            *(f"missing {k}" for k in missing[:3]),
            *(f"unexpected {k}" for k in extra[:3]),
            *(f"{k}: checkpoint {found[k]} vs model {expected[k]}" for k in wrong[:3]),
        ]
        raise CheckpointError(
            f"resume: {path} was saved from a model of another shape ({'; '.join(details)}). "
            "Resume with the model configuration it was trained with, or start fresh."
        )


def _load_full(
    parts: TrainingParts,
    path: Path,
    manifest: dict,
    state: dict,
    weights: dict[str, torch.Tensor],
) -> None:
    saved_strategy = manifest.get("strategy", "replicated")
    strategy = "fsdp" if parts.sharded else "replicated"
    if saved_strategy != strategy:
        raise CheckpointError(
            f"resume: {path} holds a full {saved_strategy} optimizer state, which does not "
            f"load into a {strategy} run. Resume with the strategy it was written with; "
            "sharded checkpoints (CheckpointConfig(layout='sharded')) load into either."
        )
    _check_shapes(parts.model, {k: tuple(v.shape) for k, v in weights.items()}, path)
    if parts.sharded:
        from torch.distributed.checkpoint.state_dict import (
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        set_model_state_dict(parts.model, dict(weights), options=_full_options())
        load: Callable[[Any], Any] = lambda saved: set_optimizer_state_dict(  # noqa: E731
            parts.model, parts.optimizer, saved, options=_full_options()
        )
    else:
        with torch.no_grad():
            for name, tensor in parts.model.state_dict().items():
                tensor.copy_(weights[name])
        load = parts.optimizer.load_state_dict
    load_optimizer_state(parts.optimizer, state[OPTIMIZER], load=load)  # saved dtypes kept


def restore(parts: TrainingParts, path: Path, *, allow_precision_change: bool = False) -> Restored:
    """Load a checkpoint into the parts, before any training step; verify it first.

    A checkpoint from another number of processes is resharded: the data position is
    recomputed from the samples consumed and the RNG of a rank without a saved state is
    re-seeded from ``(seed, step, rank)``; the notes say so. A checkpoint of another
    precision is accepted only with ``allow_precision_change`` (its loss-scaler state is then
    dropped; ``Restored.changed_from`` names the saved precision).

    A plain ``torch.distributed.checkpoint`` folder that ampkit did not write (``dcp.save`` of
    ``{"model": ..., "optimizer"/"optim": ...}``, or the model's state at the top, as
    torchtitan writes it) gives the model weights and, where it holds one keyed by parameter
    name, the optimizer state; everything else starts fresh at step 0, and the note says so.

    Raises:
        CheckpointError: the checkpoint is corrupt, from another model shape or another
            precision (unless allowed); or from another world size when the data position
            cannot be recomputed (no ``batch_size``, or not a whole number of micro-batches).
    """
    path = Path(path)
    if folder.is_plain_dcp(path):
        return _restore_plain(parts, path)
    weights, state, manifest = folder.load_checkpoint(path)  # verified once; sharded: no weights
    layout = manifest.get("layout", "full")
    required = FULL_STATE_KEYS if layout == "full" else SHARDED_STATE_KEYS
    missing = [key for key in required if key not in state]
    if missing:
        raise CheckpointError(
            f"resume: {path} lacks {', '.join(missing)} in its state. It was not written by "
            "ampkit's Trainer; resume from another checkpoint."
        )
    saved_world = manifest.get("world_size", 1)
    if not isinstance(saved_world, int) or saved_world < 1 or len(state[RNG]) != saved_world:
        raise CheckpointError(
            f"resume: {path} records world size {saved_world!r} but {len(state[RNG])} RNG "
            "states; it is damaged. Resume from another checkpoint."
        )
    changed_from = parts.engine.load_state_dict(
        state[ENGINE], allow_precision_change=allow_precision_change
    )
    if weights is not None:
        _load_full(parts, path, manifest, state, weights)
    else:
        _check_shapes(parts.model, sharded.checkpoint_shapes(path / folder.SHARDS), path)
        sharded.load_into(parts.model, parts.optimizer, path / folder.SHARDS)
    if parts.scheduler is not None and state[SCHEDULER] is not None:
        parts.scheduler.load_state_dict(state[SCHEDULER])
    parts.counters.load_state_dict(state[TRAINER])
    if saved_world == parts.dist.world_size:
        set_rng_state(state[RNG][parts.dist.rank])
        return Restored(saved_world, [], changed_from)
    notes = reshard_counters(
        parts.counters,
        state.get(DATA),
        state[RNG],
        path=path,
        batch_size=parts.batch_size,
        rank=parts.dist.rank,
        world_size=parts.dist.world_size,
        seed=parts.seed,
    )
    return Restored(saved_world, notes, changed_from)


def _restore_plain(parts: TrainingParts, path: Path) -> Restored:
    """Load the model (and optimizer) of a DCP checkpoint that ampkit did not write; the
    counters, scheduler, loss scaler, RNG and data position stay those of a fresh run."""
    layout = sharded.plain_layout(path)
    _check_shapes(parts.model, sharded.plain_shapes(path, layout), path)
    skipped = sharded.load_plain_into(parts.model, parts.optimizer, path, layout)
    loaded = "the model weights" + (" and the optimizer state" if skipped is None else "")
    absent = "" if skipped is None else f"; the optimizer starts fresh: {skipped}"
    note = (
        f"{path} is a torch.distributed.checkpoint folder that ampkit did not write: loaded "
        f"{loaded} from it (no manifest, so no hash check); it holds no trainer step, "
        f"scheduler, loss-scaler, RNG or data position, so training starts at step 0 from "
        f"those weights{absent}"
    )
    return Restored(parts.dist.world_size, [note])

"""What a Trainer checkpoint holds, and how it is taken from and put back into the training parts.

The folder format (atomic write, manifest, verification) is :mod:`ampkit.trainer.checkpoint_folder`;
this module decides the contents:

* weights: the unwrapped model's full state dict in fp32 (FSDP2: gathered to rank 0);
* :data:`OPTIMIZER`, :data:`SCHEDULER`: their state dicts (FSDP2: full, gathered);
* :data:`ENGINE`: :meth:`MixedPrecision.state_dict` (precision, loss-scaler state, counters);
* :data:`TRAINER`: :meth:`TrainerState.state_dict` (step, epoch, micro-batches in the epoch);
* :data:`RNG`: Python/NumPy/torch(/CUDA) RNG states of every rank.

Both directions work on a :class:`TrainingParts`, built once by the Trainer's set-up, so this
module never sees the Trainer itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ampkit.engine import MixedPrecision
from ampkit.errors import CheckpointError, ConfigurationError
from ampkit.trainer import checkpoint_folder as folder
from ampkit.trainer.distributed import DistContext
from ampkit.trainer.rng import get_rng_state, set_rng_state
from ampkit.trainer.state import TrainerState

__all__ = [
    "ENGINE",
    "OPTIMIZER",
    "RNG",
    "SCHEDULER",
    "STATE_KEYS",
    "TRAINER",
    "TrainingParts",
    "find_resume_checkpoint",
    "full_weights",
    "restore",
    "snapshot",
]

log = logging.getLogger("ampkit")

OPTIMIZER, SCHEDULER, ENGINE, TRAINER, RNG = "optimizer", "scheduler", "engine", "trainer", "rng"
#: The keys of ``state.pt``, in the order they are written.
STATE_KEYS = (OPTIMIZER, SCHEDULER, ENGINE, TRAINER, RNG)


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
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    engine: MixedPrecision
    counters: TrainerState
    dist: DistContext
    sharded: bool = False


def _full_options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_weights(parts: TrainingParts) -> dict[str, torch.Tensor]:
    """The model's full (unsharded) weights in fp32 on the CPU. Collective under FSDP2, where
    only rank 0 receives them (the other ranks get an empty dict)."""
    if parts.sharded:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        weights = get_model_state_dict(parts.model, options=_full_options(cpu_offload=True))
    else:
        weights = parts.model.state_dict()
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in weights.items()}


def snapshot(parts: TrainingParts) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict]:
    """Take ``(weights, state, manifest metadata)``. Collective under torchrun."""
    weights = full_weights(parts)
    if parts.sharded:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        optim = get_optimizer_state_dict(
            parts.model, parts.optimizer, options=_full_options(cpu_offload=True)
        )
    else:
        optim = parts.optimizer.state_dict()
    rng = [get_rng_state()]
    if parts.dist.distributed:
        rng = [None] * parts.dist.world_size
        dist.all_gather_object(rng, get_rng_state())
    state = {
        OPTIMIZER: optim,
        SCHEDULER: parts.scheduler.state_dict() if parts.scheduler is not None else None,
        ENGINE: parts.engine.state_dict(),
        TRAINER: parts.counters.state_dict(),
        RNG: rng,
    }
    metadata = {
        "precision": parts.engine.policy.precision,
        "world_size": parts.dist.world_size,
        "strategy": "fsdp" if parts.sharded else "replicated",
    }
    return weights, state, metadata


def _check_shapes(model: nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in weights.items()}
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


def restore(
    parts: TrainingParts, path: Path, *, allow_precision_change: bool = False
) -> str | None:
    """Load a verified checkpoint into the parts, before any training step.

    Returns the checkpoint's precision when it differs from the engine's (accepted only with
    ``allow_precision_change``; its loss-scaler state is then dropped), else None.

    Raises:
        CheckpointError: the checkpoint is corrupt, from another model shape, another world
            size (the data position would not line up) or another precision (unless allowed).
    """
    weights, state, manifest = folder.load_checkpoint(path)
    saved_world = manifest.get("world_size", 1)
    if saved_world != parts.dist.world_size:
        raise CheckpointError(
            f"resume: {path} was written by {saved_world} processes but this run has "
            f"{parts.dist.world_size}; the data position and RNG states would not line up. "
            f"Resume with {saved_world} processes."
        )
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise CheckpointError(
            f"resume: {path} lacks {', '.join(missing)} in its state. It was not written by "
            "ampkit's Trainer; resume from another checkpoint."
        )
    _check_shapes(parts.model, weights, path)
    changed_from = parts.engine.load_state_dict(
        state[ENGINE], allow_precision_change=allow_precision_change
    )
    if parts.sharded:
        from torch.distributed.checkpoint.state_dict import (
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        set_model_state_dict(parts.model, weights, options=_full_options())
        set_optimizer_state_dict(
            parts.model, parts.optimizer, state[OPTIMIZER], options=_full_options()
        )
    else:
        with torch.no_grad():
            for name, tensor in parts.model.state_dict().items():
                tensor.copy_(weights[name])
        parts.optimizer.load_state_dict(state[OPTIMIZER])
    if parts.scheduler is not None and state[SCHEDULER] is not None:
        parts.scheduler.load_state_dict(state[SCHEDULER])
    parts.counters.load_state_dict(state[TRAINER])
    set_rng_state(state[RNG][parts.dist.rank])
    return changed_from


def find_resume_checkpoint(
    checkpoint_dir: Path | None, resume: str | Path | None
) -> tuple[Path | None, list[str]]:
    """The checkpoint a run resumes from (None: start fresh), and notes on what was decided.

    ``resume=None`` refuses a ``checkpoint_dir`` that already holds checkpoints (a fresh run
    would mix with them); ``"auto"`` takes the newest checkpoint that verifies, noting each
    newer damaged one it skipped; a path is taken as given (verified when loaded).

    Raises:
        ConfigurationError: ``resume=None`` but ``checkpoint_dir`` holds checkpoints.
    """
    notes: list[str] = []
    if resume is None:
        existing = folder.find_checkpoints(checkpoint_dir) if checkpoint_dir else []
        if existing:
            raise ConfigurationError(
                f"checkpoint_dir: {checkpoint_dir} already holds checkpoints (newest: step "
                f"{existing[-1].step}); a fresh run would mix with them. Pass resume='auto' "
                "(--resume auto) to continue, or use another folder."
            )
        return None, notes
    if resume != "auto":
        return Path(resume), notes
    if checkpoint_dir is None:
        return None, notes
    info, problems = folder.latest_valid_checkpoint(checkpoint_dir)
    for problem in problems:
        notes.append(f"skipped a bad checkpoint: {problem}")
        log.warning(notes[-1])
    if info is None:
        notes.append(f"no valid checkpoint in {checkpoint_dir}: starting fresh")
        log.info(notes[-1])
        return None, notes
    return info.path, notes

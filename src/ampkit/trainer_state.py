"""What a Trainer checkpoint holds, and how it is taken and put back.

Kept apart from the loop so the checkpoint contents are in one readable place:

* weights: the unwrapped model's full state dict in fp32 (FSDP2: gathered to rank 0);
* ``optimizer``, ``scheduler``: their state dicts (FSDP2: full, gathered);
* ``engine``: :meth:`MixedPrecision.state_dict` (precision, loss-scaler state, counters);
* ``trainer``: step, epoch and micro-batches consumed in the epoch (the data position);
* ``rng``: Python/NumPy/torch(/CUDA) RNG states of every rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ampkit import checkpoint as ckpt
from ampkit.errors import CheckpointError
from ampkit.rng import get_rng_state, set_rng_state

if TYPE_CHECKING:
    from ampkit.trainer import Trainer

__all__ = ["TrainerState", "full_weights", "restore", "snapshot"]


@dataclass
class TrainerState:
    """Loop counters saved in every checkpoint.

    Attributes:
        step: optimizer steps done (skipped steps included).
        epoch: passes over the training data started.
        batch_in_epoch: micro-batches consumed in the current epoch (per process).
    """

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0


def _is_fsdp(trainer: Trainer) -> bool:
    return trainer.strategy == "fsdp" and trainer.dist.distributed


def _options(**kwargs: Any):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The model's full (unsharded) weights in fp32 on the CPU. Collective under FSDP2, where
    only rank 0 receives them (the other ranks get an empty dict)."""
    if _is_fsdp(trainer):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        weights = get_model_state_dict(trainer.raw_model, options=_options(cpu_offload=True))
    else:
        weights = trainer.raw_model.state_dict()
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in weights.items()}


def snapshot(trainer: Trainer) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """Take ``(weights, state, manifest metadata)`` of the trainer. Collective under torchrun."""
    weights = full_weights(trainer)
    if _is_fsdp(trainer):
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        optim = get_optimizer_state_dict(
            trainer.raw_model, trainer.optimizer, options=_options(cpu_offload=True)
        )
    else:
        optim = trainer.optimizer.state_dict()
    rng = [get_rng_state()]
    if trainer.dist.distributed:
        rng = [None] * trainer.dist.world_size
        dist.all_gather_object(rng, get_rng_state())
    state = {
        "optimizer": optim,
        "scheduler": trainer.scheduler.state_dict() if trainer.scheduler is not None else None,
        "engine": trainer.mp.state_dict(),
        "trainer": asdict(trainer.state),
        "rng": rng,
    }
    metadata = {
        "precision": trainer.mp.policy.precision,
        "world_size": trainer.dist.world_size,
        "strategy": trainer.strategy,
    }
    return weights, state, metadata


def _check_shapes(trainer: Trainer, weights: dict[str, torch.Tensor], path: Path) -> None:
    expected = {k: tuple(v.shape) for k, v in trainer.raw_model.state_dict().items()}
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


def restore(trainer: Trainer, path: Path) -> None:
    """Load a verified checkpoint into the trainer, before any training step.

    Raises:
        CheckpointError: the checkpoint is corrupt, from another model shape, another world
            size (the data position would not line up) or another precision.
    """
    weights, state, manifest = ckpt.load_checkpoint(path)
    saved_world = manifest.get("world_size", 1)
    if saved_world != trainer.dist.world_size:
        raise CheckpointError(
            f"resume: {path} was written by {saved_world} processes but this run has "
            f"{trainer.dist.world_size}; the data position and RNG states would not line up. "
            f"Resume with {saved_world} processes."
        )
    _check_shapes(trainer, weights, path)
    trainer.mp.load_state_dict(state["engine"])
    if _is_fsdp(trainer):
        from torch.distributed.checkpoint.state_dict import (
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        set_model_state_dict(trainer.raw_model, weights, options=_options())
        set_optimizer_state_dict(
            trainer.raw_model, trainer.optimizer, state["optimizer"], options=_options()
        )
    else:
        with torch.no_grad():
            for name, tensor in trainer.raw_model.state_dict().items():
                tensor.copy_(weights[name])
        trainer.optimizer.load_state_dict(state["optimizer"])
    if trainer.scheduler is not None and state["scheduler"] is not None:
        trainer.scheduler.load_state_dict(state["scheduler"])
    for key, value in state["trainer"].items():
        setattr(trainer.state, key, value)
    set_rng_state(state["rng"][trainer.dist.rank])

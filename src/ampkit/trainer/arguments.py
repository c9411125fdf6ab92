"""The Trainer's argument checks, run before anything is built or any process group joined."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ampkit.errors import CheckpointError, ConfigurationError
from ampkit.trainer.distributed import STRATEGIES

__all__ = ["check_arguments"]


def _check_positive(name: str, value: int | None, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"Trainer: {name}={value!r} is invalid. It must be an integer >= 1."
        )


def check_arguments(
    optimizer: Any,
    *,
    max_steps: int,
    checkpoint_every: int | None,
    keep_last: int | None,
    log_every: int,
    batch_size: int | None,
    eval_every: int | None,
    eval_data: Any,
    checkpoint_dir: str | Path | None,
    resume: str | Path | None,
    checkpoint_layout: str,
    async_checkpoint: bool,
    strategy: str,
) -> None:
    """Refuse the :class:`~ampkit.trainer.Trainer` settings that cannot work together.

    Raises:
        ConfigurationError: a count that is not an integer >= 1, ``eval_every`` without
            ``eval_data`` (or the reverse), checkpoint settings without ``checkpoint_dir``, an
            unknown layout or strategy, async writes with the full layout, an optimizer
            instance with ``strategy="fsdp"``.
        CheckpointError: ``resume`` names a file, or a folder that does not exist.
    """
    for name, value, optional in [
        ("max_steps", max_steps, False),
        ("checkpoint_every", checkpoint_every, True),
        ("keep_last", keep_last, True),
        ("log_every", log_every, False),
        ("batch_size", batch_size, True),
        ("eval_every", eval_every, True),
    ]:
        _check_positive(name, value, optional)
    if (eval_every is None) != (eval_data is None):
        raise ConfigurationError(
            "Trainer: eval_every and eval_data go together: pass both (eval_every=N, "
            "eval_data=batches) to evaluate every N steps, or neither."
        )
    if (checkpoint_every or keep_last or resume) and checkpoint_dir is None:
        raise ConfigurationError(
            "Trainer: checkpoint_every, keep_last and resume need checkpoint_dir. "
            "Pass checkpoint_dir='path/to/checkpoints'."
        )
    if resume not in (None, "auto") and Path(resume).is_file():
        raise CheckpointError(
            f"resume: {resume} is a file, not a checkpoint folder. Pass a step-NNNNNNNN "
            "folder (e.g. ckpt/step-00000500), or 'auto' to continue from the newest valid "
            "checkpoint in checkpoint_dir."
        )
    if resume not in (None, "auto") and not Path(resume).is_dir():
        raise CheckpointError(
            f"resume: {resume} does not exist. Pass a step-NNNNNNNN folder, or 'auto' to "
            "continue from the newest valid checkpoint in checkpoint_dir."
        )
    if checkpoint_layout not in ("auto", "full", "sharded"):
        raise ConfigurationError(
            f"Trainer: checkpoint_layout={checkpoint_layout!r} is unknown. Use 'auto', "
            "'full' or 'sharded'."
        )
    if async_checkpoint and checkpoint_layout == "full":
        raise ConfigurationError(
            "Trainer: async_checkpoint=True writes with torch.distributed.checkpoint, "
            "which needs checkpoint_layout='sharded' (or 'auto'), not 'full'."
        )
    if strategy not in STRATEGIES:
        raise ConfigurationError(
            f"Trainer: strategy={strategy!r} is unknown. Use one of "
            f"{', '.join(repr(s) for s in STRATEGIES)}."
        )
    if strategy == "fsdp" and isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigurationError(
            "Trainer: strategy='fsdp' replaces the parameters when sharding, so pass an "
            "optimizer factory, e.g. optimizer=lambda params: torch.optim.AdamW(params)."
        )

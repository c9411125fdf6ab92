"""The Trainer's own keywords (those in no config), checked once and kept as given; and the
keywords of earlier Trainer signatures with the form that replaced each.

:class:`TrainerArgs` is what ``Trainer(...)`` was given besides its configs and the
precision (which :class:`~ampkit.MixedPrecision` takes whole): the Trainer reads these from
``trainer.args`` and copies none of them. :data:`MOVED` is the migration table: an old keyword
fails in one line naming its new form (:class:`~ampkit.KeywordError`, a ``TypeError``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampkit.errors import ConfigurationError
from ampkit.precision.modes._deprecated import moved_mode_keywords
from ampkit.trainer.config import check_count, check_length

__all__ = ["MOVED", "OptimizerLike", "SchedulerLike", "TrainerArgs"]

OptimizerLike = torch.optim.Optimizer | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedulerLike = Any  # an LRScheduler, or a callable optimizer -> LRScheduler

_CKPT = "checkpoint=CheckpointConfig(dir, {}=...)"

#: Keywords of earlier ``Trainer`` signatures (``git log -p -- src/ampkit/trainer/trainer.py``)
#: -> the form that replaced each.
MOVED: dict[str, str] = {
    "checkpoint_dir": "checkpoint=CheckpointConfig(dir=..., every=...)",
    "checkpoint_every": _CKPT.format("every"),
    "keep_last": _CKPT.format("keep_last"),
    "resume": _CKPT.format("resume"),
    "checkpoint_layout": _CKPT.format("layout"),
    "async_checkpoint": _CKPT.format("async_save"),
    "resume_precision_change": _CKPT.format("allow_precision_change"),
    "run_config": _CKPT.format("run_config"),
    "log_every": "logging=LoggingConfig(log_every=...)",
    "metrics_file": "logging=LoggingConfig(metrics_file=...)",
    "progress_bar": "logging=LoggingConfig(progress_bar=...)",
    "tokens_per_sample": "logging=LoggingConfig(tokens_per_sample=...)",
    "eval_every": "eval=EvalConfig(every=..., data=...)",
    "eval_data": "eval=EvalConfig(every=..., data=...)",
    "strategy": "distributed=DistributedConfig(strategy=...)",
    "compile_mode": "compile=CompileConfig(mode=...)",
    "scaler_options": "scaler=ampkit.LossScaler(...)",
    # and each mode's old keywords, which the mode lists (fp8_plan -> precision=ampkit.Fp8(...))
    **moved_mode_keywords(),
}


@dataclass(frozen=True)
class TrainerArgs:
    """The Trainer's keywords that belong to no config (see :class:`~ampkit.Trainer` for each).

    Raises:
        ConfigurationError: both or neither of ``max_steps`` and ``epochs``, a count that is
            not an integer >= 1, ``handle_signals`` not a bool.
    """

    optimizer: OptimizerLike
    scheduler: SchedulerLike = None
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    max_steps: int | None = None
    epochs: int | None = None
    batch_size: int | None = None
    num_workers: int | None = None
    seed: int = 0
    final_weights: str | Path | None = None
    channels_last: bool = False
    cudnn_benchmark: bool = False
    handle_signals: bool = False

    def __post_init__(self) -> None:
        check_length(self.max_steps, self.epochs)
        check_count("Trainer", "batch_size", self.batch_size)
        if not isinstance(self.handle_signals, bool):
            raise ConfigurationError(
                f"Trainer: handle_signals={self.handle_signals!r} is invalid. It must be True "
                "or False."
            )
        final = self.final_weights
        object.__setattr__(self, "final_weights", Path(final) if final else None)

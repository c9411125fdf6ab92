"""The Trainer: a training loop on :class:`~ampkit.MixedPrecision` with resumable checkpoints,
DDP/FSDP2 under torchrun, callbacks and metrics.

Modules: :mod:`~ampkit.trainer.trainer` (the loop), :mod:`~ampkit.trainer.config` (its
grouped, validated settings), :mod:`~ampkit.trainer.args` (its own keywords, and the old ones'
new forms), :mod:`~ampkit.trainer.state` (loop counters), :mod:`~ampkit.trainer.callbacks`,
:mod:`~ampkit.trainer.checkpointing` (the ``Checkpointer``: when to save, what a checkpoint
holds, resume) over :mod:`~ampkit.checkpoint.folder` (the atomic, verified folder format),
:mod:`~ampkit.trainer.distributed`, :mod:`~ampkit.trainer.data` (the loader; the batch
convention is :mod:`ampkit.precision.batches`), :mod:`~ampkit.trainer.metrics`,
:mod:`~ampkit.trainer.evaluation` (eval metrics).
"""

from ampkit.trainer.callbacks import Callback as Callback
from ampkit.trainer.config import CheckpointConfig as CheckpointConfig
from ampkit.trainer.config import CompileConfig as CompileConfig
from ampkit.trainer.config import DistributedConfig as DistributedConfig
from ampkit.trainer.config import EvalConfig as EvalConfig
from ampkit.trainer.config import LoggingConfig as LoggingConfig
from ampkit.trainer.evaluation import EvalResult as EvalResult
from ampkit.trainer.evaluation import accuracy as accuracy
from ampkit.trainer.result import FitResult as FitResult
from ampkit.trainer.trainer import Trainer as Trainer

__all__ = [
    "Callback",
    "CheckpointConfig",
    "CompileConfig",
    "DistributedConfig",
    "EvalConfig",
    "EvalResult",
    "FitResult",
    "LoggingConfig",
    "Trainer",
    "accuracy",
]

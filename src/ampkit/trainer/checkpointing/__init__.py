"""The Trainer's checkpoints, as one component.

* :mod:`~ampkit.trainer.checkpointing.checkpointer`: :class:`Checkpointer`, built from a
  :class:`~ampkit.CheckpointConfig` whole: when to save, the layout, retention, asynchronous
  writes, the run lock on the folder, which checkpoint to resume and the reshard;
* :mod:`~ampkit.trainer.checkpointing.contents`: what a checkpoint holds
  (:class:`TrainingParts` in, :func:`restore` back);
* :mod:`~ampkit.trainer.checkpointing.writer`: the collective writer (full or sharded,
  synchronous or asynchronous) over :mod:`ampkit.checkpoint` (the on-disk format);
* :mod:`~ampkit.trainer.checkpointing.resume`: the checkpoint a run resumes from, decided by
  rank 0 and checked by every rank;
* :mod:`~ampkit.trainer.checkpointing.reshard`: the data position and RNG on another number of
  processes; :mod:`~ampkit.trainer.checkpointing.rng`: the generators of a process.
"""

from ampkit.trainer.checkpointing.checkpointer import Checkpointer as Checkpointer
from ampkit.trainer.checkpointing.contents import TrainingParts as TrainingParts

__all__ = ["Checkpointer", "TrainingParts"]

"""``Checkpointer``: a run's checkpoints as one component, built from its config whole.

The Trainer builds one from its :class:`~ampkit.CheckpointConfig` (or None: no checkpoints)
and calls it at four points; it keeps none of the config's fields::

    checkpointer = Checkpointer(config)
    checkpointer.start(parts)          # fit's set-up: the layout, the run lock (rank 0)
    checkpointer.resume(metrics_file)  # the checkpoint to resume, restored into the parts
    for each optimizer step:
        checkpointer.maybe_save(step, last=...)   # every CheckpointConfig.every, and the last
    checkpointer.finish()              # commit an asynchronous write still in flight
    checkpointer.stop()                # fit's end: the lock is released

Everything a checkpoint decision needs is here: when to save (``every``, the last step),
the layout (``auto``: sharded under FSDP2 or with ``async_save``), retention (``keep_last``,
applied by the folder format as each checkpoint is committed), asynchronous writes
(:mod:`~ampkit.trainer.checkpointing.writer`), which checkpoint to resume
(:mod:`~ampkit.trainer.checkpointing.resume`) and the reshard on another number of processes
(:mod:`~ampkit.trainer.checkpointing.reshard`, through :func:`restore`).

The run lock: while ``fit`` runs (and around a :meth:`save` after it), rank 0 holds
:class:`~ampkit._lock.FolderLock` on ``CheckpointConfig.dir``, the lock ``ampkit train`` takes
on its ``--out``: a second process on the same folder is refused before it reads or prunes
anything (:class:`~ampkit.RunInUseError`, on every rank of its job), instead of the two
deleting each other's checkpoints. A folder inside a run folder that this process (or the
``ampkit train --nproc`` launcher that started it) holds already, ``ampkit train``'s
``--out/checkpoints``, is covered by that lock and not locked again.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch.distributed as dist

from ampkit._lock import FolderLock, held_by
from ampkit._process import launched_by_ampkit
from ampkit.errors import AmpkitError, ConfigurationError, StorageError
from ampkit.trainer.checkpointing.contents import TrainingParts, restore
from ampkit.trainer.checkpointing.resume import (
    check_shared_folder,
    choose_resume_checkpoint,
    set_aside_lost_metrics,
)
from ampkit.trainer.checkpointing.writer import CheckpointWriter
from ampkit.trainer.config import CheckpointConfig
from ampkit.trainer.distributed import broadcast_from_main

__all__ = ["Checkpointer", "Resumed"]

log = logging.getLogger("ampkit")


def _inside_held_run(folder: Path) -> bool:
    """Whether ``folder`` lies in a run folder that this process or the ``ampkit train
    --nproc`` launcher that started it holds (``ampkit train``'s ``--out/checkpoints``): that
    lock covers it already."""
    ours = {os.getpid()}
    launcher = launched_by_ampkit()
    if launcher is not None:
        ours.add(launcher)
    return held_by(folder.parent, ours)


@dataclass(frozen=True)
class Resumed:
    """What :meth:`Checkpointer.resume` did: notes for ``FitResult.notes``, and the precision
    change (``"fp16 -> bf16"``) when a checkpoint of another precision was resumed on purpose."""

    notes: list[str] = field(default_factory=list)
    precision_change: str | None = None


class Checkpointer:
    """Writes, retains and resumes one run's checkpoints, as its ``CheckpointConfig`` says.

    Args:
        config: the run's checkpoint settings; None: no checkpoints (every method but
            :meth:`save` is then a no-op).

    Attributes:
        config: the config it was built from (the one place its settings live).
        saved: the checkpoints committed so far (rank 0), oldest first.
        resumed_from: the checkpoint the last ``resume`` restored, or None.
        resharded: that checkpoint came from another number of processes.
        in_loop: the training loop is running (an asynchronous write is then committed at the
            next save or at :meth:`finish`, not at once).
        best: ``(value, checkpoint)`` of the best ``CheckpointConfig.keep_best`` value so far
            in this ``fit`` (kept from pruning), or None.
    """

    def __init__(self, config: CheckpointConfig | None) -> None:
        self.config = config
        self.saved: list[str] = []
        self.resumed_from: Path | None = None
        self.resharded = False
        self.in_loop = False
        self.best: tuple[float, Path] | None = None
        self._parts: TrainingParts | None = None
        self._writer: CheckpointWriter | None = None
        self._lock: FolderLock | None = None  # rank 0's
        self._locked = False  # on every rank: rank 0 holds the lock for this job

    @property
    def folder(self) -> Path | None:
        """``CheckpointConfig.dir``, or None without checkpoints."""
        return self.config.path if self.config is not None else None

    def path_of(self, step: int) -> Path | None:
        """Where the checkpoint of ``step`` is (or will be) committed."""
        return self.folder / f"step-{step:08d}" if self.folder is not None else None

    def start(self, parts: TrainingParts) -> None:
        """At ``fit``'s set-up: take the parts, decide the layout, lock the folder (rank 0).

        Raises:
            RunInUseError: another process holds the folder (raised on every rank).
            StorageError: the folder cannot be created or its lock file written.
        """
        self._parts, self.best = parts, None
        config = self.config
        if config is None:
            return
        if config.run_config is not None:  # recorded as ``config`` in every manifest
            parts.run_config = dict(config.run_config)
        layout = config.layout
        if layout == "auto":
            layout = "sharded" if parts.sharded or config.async_save else "full"
        self._writer = CheckpointWriter(
            config.path, layout, async_save=config.async_save, keep_last=config.keep_last
        )
        self._acquire()

    def _acquire(self) -> bool:
        """Take the run lock on rank 0 unless this job holds it; every rank learns whether
        rank 0 could (collective). Returns whether this call took it."""
        if self._locked:
            return False
        parts, folder = self._parts, self.folder
        if parts is None or folder is None:
            return False
        error: AmpkitError | None = None
        if parts.dist.is_main:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                error = StorageError.from_os_error(exc, str(folder), "CheckpointConfig.dir")
            if error is None and not _inside_held_run(folder):
                lock = FolderLock(folder, flag="CheckpointConfig.dir", remove=True)
                try:
                    self._lock = lock.acquire()
                except AmpkitError as exc:
                    error = exc
        failed = broadcast_from_main(
            parts.dist, None if error is None else (type(error), str(error))
        )
        if error is not None:
            raise error
        if failed is not None:  # the other ranks of this job: the same one line, no waiting
            kind, message = failed
            raise kind(message)
        self._locked = True
        return True

    def _release(self) -> None:
        lock, self._lock, self._locked = self._lock, None, False
        if lock is not None:
            lock.release()

    def resume(self, metrics_file: str | Path | None = None) -> Resumed:
        """Restore the checkpoint ``CheckpointConfig.resume`` asks for into the parts (before
        any step); with ``"auto"`` and no valid checkpoint, set the earlier run's metrics
        aside. Collective under torchrun.

        Raises:
            ConfigurationError, CheckpointError, RanksDisagreeError: as
                :func:`~ampkit.trainer.checkpointing.resume.choose_resume_checkpoint` and
                :func:`~ampkit.trainer.checkpointing.contents.restore`.
        """
        config, parts, writer = self.config, self._need_parts(), self._writer
        if config is None or writer is None:
            return Resumed()
        notes = check_shared_folder(parts.dist, config.path, writer.layout)
        if parts.dist.is_main:
            for note in notes:
                log.warning(note)
        path, found = choose_resume_checkpoint(parts.dist, config.path, config.resume)
        notes += found
        if path is None:
            if config.resume == "auto" and metrics_file is not None and parts.dist.is_main:
                kept = set_aside_lost_metrics(Path(metrics_file))
                if kept is not None:
                    notes.append(
                        "the earlier run committed no checkpoint, so this one starts fresh; "
                        f"its metrics were kept as {kept}"
                    )
                    log.warning(notes[-1])
            return Resumed(notes)
        restored = restore(parts, path, allow_precision_change=config.allow_precision_change)
        self.resharded = restored.saved_world_size != parts.dist.world_size
        self.resumed_from = path
        said = [f"resumed from {path} at step {parts.counters.step}", *restored.notes]
        for note in said:
            log.info(note)
        notes += said
        if restored.changed_from is None:
            return Resumed(notes)
        change = f"{restored.changed_from} -> {parts.engine.policy.precision}"
        notes.append(
            f"precision changed on resume: {change} (weights and optimizer state carried "
            "over, loss-scaler state dropped)"
        )
        log.warning(notes[-1])
        return Resumed(notes, change)

    def due(self, step: int, *, last: bool = False) -> bool:
        """Whether optimizer step ``step`` is written: every ``CheckpointConfig.every`` steps
        and the last one."""
        config = self.config
        if config is None:
            return False
        return last or (config.every is not None and step % config.every == 0)

    def maybe_save(
        self,
        step: int,
        *,
        last: bool = False,
        before: Callable[[], None] | None = None,
        scores: Mapping[str, float] | None = None,
    ) -> list[Path]:
        """:meth:`save` when step ``step`` is :meth:`due`, after ``before()`` (the Trainer's
        finite-loss check); returns the checkpoints committed (rank 0). ``scores``: the
        values evaluated at this step (``{"eval_loss": ...}``), for ``keep_best``."""
        if not self.due(step, last=last):
            return []
        if before is not None:
            before()
        return self.save(scores)

    def _score(self, scores: Mapping[str, float] | None) -> None:
        """Make the current step the best one if its ``keep_best`` value is better."""
        config, writer, parts = self.config, self._writer, self._parts
        if config is None or config.keep_best is None or writer is None or parts is None:
            return
        value = (scores or {}).get(config.keep_best)
        if value is None or not math.isfinite(value):
            return  # not evaluated at this step (or not finite): it does not compete
        best = self.best
        better = best is None or (value < best[0] if config.best_mode == "min" else value > best[0])
        if better:
            path = self.path_of(parts.counters.step)
            if path is not None:
                self.best = (value, path)
                writer.keep = {path}

    def best_note(self) -> str | None:
        """The note on the best checkpoint for ``FitResult.notes`` (None without one)."""
        config, best = self.config, self.best
        if config is None or best is None:
            return None
        return f"best {config.keep_best} {best[0]:.6g} ({config.best_mode}): {best[1]} (kept)"

    def save(self, scores: Mapping[str, float] | None = None) -> list[Path]:
        """Write a checkpoint of the current step (collective). Skips a step that already has
        one. Returns the checkpoints committed by this call on rank 0 (with ``async_save``
        inside the loop: the previous one, whose background write is then complete).
        ``scores``: as :meth:`maybe_save`.

        Raises:
            ConfigurationError: no ``CheckpointConfig``, or ``fit`` has not set up the parts.
        """
        if self.config is None:
            raise ConfigurationError(
                "Trainer.save_checkpoint: no checkpoint folder was given. Pass "
                "checkpoint=CheckpointConfig('path/to/checkpoints')."
            )
        parts, writer = self._need_parts(), self._writer
        if writer is None or writer.last_step == parts.counters.step:
            return []
        self._score(scores)
        took = not self._locked and self._acquire()  # held by fit; taken for a save after it
        try:
            committed = writer.save(parts)
            if not self.in_loop:  # nothing later would commit an asynchronous write
                committed += writer.finish(parts)
        finally:
            if took:
                self._release()
        self.saved += [str(path) for path in committed]
        if parts.dist.distributed:
            dist.barrier()
        return committed

    def finish(self) -> list[Path]:
        """Commit an asynchronous checkpoint still being written (collective); the loop is
        over. Returns what was committed (rank 0)."""
        self.in_loop = False
        if self._writer is None or self._parts is None:
            return []
        committed = self._writer.finish(self._parts)
        self.saved += [str(path) for path in committed]
        return committed

    def finish_after_error(self) -> list[Path]:
        """After training failed: commit a completed asynchronous write without collectives
        (:meth:`CheckpointWriter.finish_after_error`)."""
        if self._writer is None:
            return []
        committed = self._writer.finish_after_error()
        self.saved += [str(path) for path in committed]
        return committed

    def stop(self) -> None:
        """At the end of ``fit`` (however it ended): release the run lock."""
        self.in_loop = False
        self._release()

    def close(self) -> None:
        """Release the lock and the writer's process group (idempotent)."""
        self.stop()
        if self._writer is not None:
            self._writer.close()

    def _need_parts(self) -> TrainingParts:
        if self._parts is None:
            raise ConfigurationError(
                "Trainer: the model, optimizer and scheduler are set up by fit(); call "
                "fit() before save_checkpoint() or evaluate()."
            )
        return self._parts

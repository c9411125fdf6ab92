"""Writing the Trainer's checkpoints: full or sharded layout, synchronous or asynchronous.

Every method is collective under torchrun. ``full``: the parts are gathered
(:func:`~ampkit.trainer.checkpointing.contents.snapshot`) and rank 0 writes the folder. ``sharded``: rank 0
makes the temporary folder, every rank writes its shards into it with
``torch.distributed.checkpoint`` (:mod:`ampkit.checkpoint.sharded`), then rank 0 hashes the files,
writes the manifest and ``COMPLETE`` and renames the folder (:mod:`ampkit.checkpoint.folder`).
When rank 0 fails, every rank raises, so no rank waits for a peer that gave up.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch.distributed as dist

from ampkit.checkpoint import folder as folder
from ampkit.checkpoint import sharded
from ampkit.checkpoint._digest import FileDigest
from ampkit.checkpoint.weights import (
    disk_full_error,
    find_aliases,
    nonfinite_names,
    refuse_nonfinite,
)
from ampkit.errors import CheckpointError, ConfigurationError
from ampkit.trainer.checkpointing.contents import TrainingParts, snapshot

__all__ = ["CheckpointWriter"]

log = logging.getLogger("ampkit")


def _agree(parts: TrainingParts, error: BaseException | None) -> None:
    """Raise on every rank when rank 0 failed (rank 0 re-raises its own error)."""
    if not parts.dist.distributed:
        if error is not None:
            raise error
        return
    message = [None if error is None else str(error)]
    dist.broadcast_object_list(message, src=0)
    if error is not None:
        raise error
    if message[0] is not None:
        raise CheckpointError(f"rank 0 could not write the checkpoint: {message[0]}")


def _gathered_digests(parts: TrainingParts, shards: Path | None) -> dict[str, FileDigest]:
    """Every rank hashes the shard files it wrote; rank 0 gets them all (others: {}).

    A rank whose files cannot be hashed sends none: rank 0 then hashes (or misses) them
    itself when it commits, so the gather never leaves a rank waiting.
    """
    mine: dict[str, FileDigest] = {}
    if shards is not None:
        try:
            found = sharded.shard_digests(shards, parts.dist.rank)
            mine = {f"{folder.SHARDS}/{name}": digest for name, digest in found.items()}
        except OSError:
            mine = {}
    if not parts.dist.distributed:
        return mine
    everyone: list[Any] = [None] * parts.dist.world_size if parts.dist.is_main else []
    dist.gather_object(mine, everyone if parts.dist.is_main else None, dst=0)
    return {name: d for part in everyone for name, d in (part or {}).items()}


@dataclass
class _Pending:
    """A sharded checkpoint whose shards are (being) written; rank 0 commits it."""

    step: int
    tmp: Path | None  # rank 0 only
    future: Future | None  # None: written synchronously
    state: bytes = b""
    metadata: dict[str, Any] = field(default_factory=dict)
    shards: Path | None = None  # the dcp/ folder, on every rank


class CheckpointWriter:
    """Writes one run's checkpoints into ``root``: ``full`` or ``sharded`` layout, the sharded
    one optionally asynchronous, pruned to the newest ``keep_last``. Every method is collective
    under torchrun and returns the checkpoints it committed (on rank 0; [] on other ranks).

    An asynchronous checkpoint is committed (manifest, ``COMPLETE``, rename) only after its
    future completed and every rank's files are on disk: at the next :meth:`save` or at
    :meth:`finish`; until then it is an ignored temporary folder.
    """

    def __init__(
        self, root: Path, layout: str, *, async_save: bool = False, keep_last: int | None = None
    ) -> None:
        if layout not in folder.LAYOUTS:
            raise ConfigurationError(
                f"layout: {layout!r} is unknown. Use 'auto', 'full' or 'sharded'."
            )
        self.root, self.layout = root, layout
        self.async_save, self.keep_last = async_save, keep_last
        self.keep: set[Path] = set()  # checkpoints pruning leaves alone (the best one)
        self.last_step: int | None = None
        self._pending: _Pending | None = None
        self._group: Any = None

    def save(self, parts: TrainingParts) -> list[Path]:
        """Checkpoint the current step (sharded: committing a pending asynchronous one first;
        the full layout never leaves one pending)."""
        step = parts.counters.step
        self.last_step = step
        if self.layout == "sharded":
            committed = self.finish(parts)
            self._start_sharded(parts, step)
            return committed if self.async_save else committed + self.finish(parts)
        weights, state, metadata = snapshot(parts)
        path, error = None, None
        if parts.dist.is_main:
            try:
                path = folder.write_checkpoint(
                    self.root,
                    step,
                    cast(dict, weights),  # the full layout: gathered (rank 0) or {}
                    state,
                    metadata,
                    keep_last=self.keep_last,
                    keep=self.keep,
                )
            except BaseException as exc:  # every rank must learn that rank 0 failed
                error = exc
        _agree(parts, error)
        return [path] if path else []

    def _start_sharded(self, parts: TrainingParts, step: int) -> None:
        shards = sharded.state_dicts(parts.model, parts.optimizer)
        bad = nonfinite_names(shards[sharded.MODEL])
        if parts.dist.distributed:
            everywhere: list[Any] = [None] * parts.dist.world_size
            dist.all_gather_object(everywhere, bad)
            bad = sorted({name for names in everywhere for name in names})
        refuse_nonfinite(bad, self.root / f"step-{step:08d}")
        _, state, metadata = snapshot(parts, full=False)
        metadata["aliases"] = find_aliases(shards[sharded.MODEL])
        tmp, error = None, None
        if parts.dist.is_main:
            try:
                tmp = folder.begin_checkpoint(self.root, step)
            except BaseException as exc:
                error = exc
        _agree(parts, error)
        shared = [tmp]
        if parts.dist.distributed:
            dist.broadcast_object_list(shared, src=0)
        # rank 0 began the folder (else _agree raised on every rank): never None here
        target = cast(Path, shared[0]) / folder.SHARDS
        future = None
        try:
            if self.async_save:
                future = sharded.async_save(shards, target, process_group=self._async_group(parts))
            else:
                sharded.save(shards, target)
        except BaseException as exc:
            self._fail(tmp, exc, target)
        self._pending = _Pending(
            step, tmp, future, folder.serialise_state(state) if tmp else b"", metadata, target
        )

    def _async_group(self, parts: TrainingParts) -> Any:
        # The background thread's collectives get a gloo group of their own, so they never
        # interleave with the training step's collectives on the default group.
        if parts.dist.distributed and self._group is None:
            self._group = dist.new_group(backend="gloo")
        return self._group

    def _fail(self, tmp: Path | None, exc: BaseException, target: Path) -> None:
        if tmp is not None:
            folder.abort_checkpoint(tmp)
        full = disk_full_error(exc, target)
        if full is not None:
            raise full from None
        error = sharded.dcp_failure(exc)
        if error is not None:
            raise CheckpointError(
                f"checkpoint: writing the shards into {target} failed "
                f"({type(error).__name__}: {error}); nothing was kept of this write."
            ) from None
        raise exc

    def finish(self, parts: TrainingParts) -> list[Path]:
        """Commit the pending checkpoint, waiting for its asynchronous write (if any)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return []
        if pending.future is not None:
            try:
                pending.future.result()
            except BaseException as exc:
                self._fail(pending.tmp, exc, (pending.tmp or self.root) / folder.SHARDS)
        digests = _gathered_digests(parts, pending.shards)
        path, error = None, None
        if pending.tmp is not None:
            try:
                path = folder.commit_checkpoint(
                    pending.tmp,
                    pending.step,
                    pending.state,
                    pending.metadata,
                    layout="sharded",
                    digests=digests,
                    keep_last=self.keep_last,
                    keep=self.keep,
                )
            except BaseException as exc:
                error = exc
        _agree(parts, error)
        return [path] if path else []

    def finish_after_error(self) -> list[Path]:
        """After training failed: wait for a pending asynchronous write and commit it if it
        completed (rank 0), without collectives, as the other ranks may be gone. A write that
        failed too is removed and logged; the training error is the one raised."""
        pending, self._pending = self._pending, None
        if pending is None or pending.future is None:
            if pending is not None and pending.tmp is not None:
                folder.abort_checkpoint(pending.tmp)
            return []
        try:
            pending.future.result()
            if pending.tmp is None:
                return []
            path = folder.commit_checkpoint(
                pending.tmp,
                pending.step,
                pending.state,
                pending.metadata,
                layout="sharded",
                keep_last=self.keep_last,
                keep=self.keep,
            )
        except BaseException as exc:  # the training error that brought us here wins
            if pending.tmp is not None:
                folder.abort_checkpoint(pending.tmp)
            log.warning(
                "the asynchronous checkpoint of step %d was not kept: %s", pending.step, exc
            )
            return []
        return [path]

    def close(self) -> None:
        """Destroy the process group of the asynchronous writes, if one was made."""
        group, self._group = self._group, None
        if group is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)

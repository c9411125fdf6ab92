"""Which checkpoint a run resumes from, decided by rank 0 and checked by every rank.

* :func:`find_resume_checkpoint`: the choice in one process (``resume=None`` refuses a folder
  that holds checkpoints; ``"auto"`` takes the newest that verifies; a path is taken as given);
* :func:`choose_resume_checkpoint`: the same choice under torchrun, broadcast by rank 0 and
  checked against what every rank sees (:class:`~ampkit.RanksDisagreeError` before any step);
* :func:`check_shared_folder` / :func:`unshared_ranks`: whether every rank sees the folder;
* :func:`set_aside_lost_metrics`: the metrics of an earlier run that committed no checkpoint.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

from ampkit.checkpoint import folder as folder
from ampkit.errors import AmpkitError, CheckpointError, ConfigurationError, RanksDisagreeError
from ampkit.trainer.distributed import DistContext, all_gather, broadcast_from_main, ranks_listed

__all__ = [
    "check_shared_folder",
    "choose_resume_checkpoint",
    "find_resume_checkpoint",
    "set_aside_lost_metrics",
    "unshared_ranks",
]

log = logging.getLogger("ampkit")


def find_resume_checkpoint(
    checkpoint_dir: Path | None, resume: str | Path | None
) -> tuple[Path | None, list[str]]:
    """The checkpoint a run resumes from (None: start fresh), and notes on what was decided.

    ``resume=None`` refuses a ``checkpoint_dir`` (``CheckpointConfig.dir``) that already holds
    checkpoints (a fresh run
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
                f"checkpoint: {checkpoint_dir} already holds checkpoints (newest: step "
                f"{existing[-1].step}) and this run was not asked to resume (resume=None), so "
                "it would mix with them. Pass resume='auto' (--resume auto) to continue, or "
                "use another folder."
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


#: How long a rank looks for rank 0's probe file before it counts as not seeing the folder
#: (a shared file system may show a new file to other machines a moment later).
_PROBE_WAIT_S = 2.0


def unshared_ranks(ctx: DistContext, checkpoint_dir: Path) -> list[int]:
    """The ranks that do not see ``checkpoint_dir`` as rank 0 does: rank 0 writes a probe file
    there (a fresh name and token), every rank looks for it. Collective; [] in one process, or
    when rank 0 cannot write there (the checkpoint write reports that itself)."""
    if not ctx.distributed:
        return []
    token: str | None = None
    if ctx.is_main:
        try:
            checkpoint_dir.mkdir(parents=True, exist_ok=True)
            token = uuid.uuid4().hex
            (checkpoint_dir / f".ampkit-shared-{token}").write_text(token)
        except OSError:
            token = None
    token = broadcast_from_main(ctx, token)
    if token is None:
        return []
    probe = checkpoint_dir / f".ampkit-shared-{token}"
    deadline = time.monotonic() + _PROBE_WAIT_S
    while True:
        try:
            sees = probe.read_text() == token
        except OSError:
            sees = False
        if sees or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    views = all_gather(ctx, sees)
    if ctx.is_main:
        probe.unlink(missing_ok=True)
    return [rank for rank, seen in enumerate(views) if not seen]


def check_shared_folder(ctx: DistContext, checkpoint_dir: Path, layout: str) -> list[str]:
    """Check, before any step, that every rank sees the checkpoint folder rank 0 sees.

    A sharded checkpoint needs it (every rank writes its shards there, rank 0 commits them):
    refused on every rank alike. A full one is written by rank 0 alone, so the run goes on, with
    a note that it cannot be resumed on these processes. Returns the notes.

    Raises:
        CheckpointError: ``layout`` is ``sharded`` and some rank does not see the folder.
    """
    missing = unshared_ranks(ctx, checkpoint_dir)
    if not missing:
        return []
    who = ranks_listed(missing)
    if layout == "sharded":
        raise CheckpointError(
            f"checkpoint: {who} {'does' if len(missing) == 1 else 'do'} not see the checkpoint "
            f"folder {checkpoint_dir} that rank 0 sees (a file rank 0 wrote there is missing "
            "for them), so sharded checkpoints, which every rank writes into, would be "
            "incomplete. Put CheckpointConfig.dir (--out) on storage every node shares, at the "
            "same path on each (NFS, Lustre, ...), or use the full layout."
        )
    return [
        f"checkpoint: {who} {'does' if len(missing) == 1 else 'do'} not see the checkpoint folder "
        f"{checkpoint_dir} that rank 0 writes to: its checkpoints are written by rank 0 alone "
        "and cannot be resumed on these processes. Put CheckpointConfig.dir on storage every "
        "node shares to resume."
    ]


def choose_resume_checkpoint(
    ctx: DistContext, checkpoint_dir: Path | None, resume: str | Path | None
) -> tuple[Path | None, list[str]]:
    """:func:`find_resume_checkpoint` decided once, by rank 0, and checked by every rank.

    Rank 0 picks the checkpoint (or a fresh start) and broadcasts it; every rank then says
    which checkpoints it sees in its own ``checkpoint_dir`` and whether it can read rank 0's
    choice. A rank that cannot read the choice, or (``resume="auto"``) does not see it among its
    own checkpoints, or sees checkpoints where rank 0 starts fresh, is a disagreement: every
    rank raises the same error, before any step, instead of training apart. One process:
    :func:`find_resume_checkpoint` itself.

    Raises:
        RanksDisagreeError: the ranks see different checkpoints (the message names the ranks
            and what each sees).
        ConfigurationError, CheckpointError: as :func:`find_resume_checkpoint` (on every rank).
    """
    if not ctx.distributed:
        return find_resume_checkpoint(checkpoint_dir, resume)
    choice: Path | None = None
    notes: list[str] = []
    error: AmpkitError | None = None
    if ctx.is_main:
        try:
            choice, notes = find_resume_checkpoint(checkpoint_dir, resume)
        except AmpkitError as exc:
            error = exc
    decided = broadcast_from_main(
        ctx,
        (
            None if choice is None else str(choice),
            notes,
            None if error is None else (type(error), str(error)),
        ),
    )
    if error is not None:
        raise error
    if decided[2] is not None:
        kind, message = decided[2]
        raise kind(message)
    choice = None if decided[0] is None else Path(decided[0])
    seen = (
        [info.path.name for info in folder.find_checkpoints(checkpoint_dir)]
        if checkpoint_dir
        else []
    )
    readable = choice is None or choice.is_dir()
    if choice is not None and resume == "auto":
        readable = readable and any(
            i.path == choice for i in folder.find_checkpoints(choice.parent)
        )
    views = all_gather(ctx, (str(checkpoint_dir), seen, readable))
    main_seen = set(views[0][1])
    wrong: list[int] = []
    for rank, (_where, names, can_read) in enumerate(views):
        if choice is not None:
            if not can_read or (resume == "auto" and choice.name not in names):
                wrong.append(rank)
        elif resume == "auto" and set(names) - main_seen:
            wrong.append(rank)
    if not wrong:
        return choice, list(decided[1])
    chosen = (
        f"resumes {choice}"
        if choice is not None
        else f"starts fresh ({views[0][0]} holds no valid checkpoint)"
    )
    seen_by: dict[tuple[str, str | None, bool], list[int]] = {}
    for rank in wrong:
        where, names, can_read = views[rank]
        seen_by.setdefault((where, names[-1] if names else None, can_read), []).append(rank)
    parts = []
    for (where, newest, can_read), ranks in seen_by.items():
        sees = f"newest {newest}" if newest else "no checkpoint"
        unread = "" if can_read or choice is None else "cannot read it and "
        parts.append(
            f"{ranks_listed(ranks)} {unread}see{'s' if len(ranks) == 1 else ''} {sees} in {where}"
        )
    raise RanksDisagreeError(
        f"resume: the processes disagree on the checkpoint to resume: rank 0 {chosen}; "
        f"{'; '.join(parts)}. Every rank must see the same checkpoint folder: put "
        "CheckpointConfig.dir on storage all nodes share (the same path on each), then resume "
        "again."
    )


def set_aside_lost_metrics(metrics_file: Path) -> Path | None:
    """Rename the metrics file of an earlier run that committed no checkpoint (its steps are
    lost) to ``<stem>.lost-<UTC time><suffix>``, so a fresh start neither refuses nor
    overwrites it; return the new path (None: no such file, or an empty one).

    Raises:
        StorageError: the file cannot be renamed.
    """
    from ampkit.errors import StorageError

    if not metrics_file.is_file() or not metrics_file.stat().st_size:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = metrics_file.with_name(f"{metrics_file.stem}.lost-{stamp}{metrics_file.suffix}")
    number = 1
    while target.exists():
        number += 1
        target = metrics_file.with_name(
            f"{metrics_file.stem}.lost-{stamp}-{number}{metrics_file.suffix}"
        )
    try:
        metrics_file.rename(target)
    except OSError as exc:
        raise StorageError.from_os_error(
            exc, f"{target} (setting the lost run's metrics aside)"
        ) from None
    return target

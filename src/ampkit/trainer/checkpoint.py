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

Saving is :class:`~ampkit.trainer.checkpoint_writer.CheckpointWriter` (collective under
torchrun), loading :func:`restore`; both work on a :class:`TrainingParts`, built once by the Trainer's set-up, so this module never sees
the Trainer itself. Resharding (a resume on another world size) is in :mod:`ampkit.trainer.reshard`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ampkit.checkpoint import folder as folder
from ampkit.checkpoint import sharded
from ampkit.checkpoint.rng import get_rng_state, set_rng_state
from ampkit.errors import AmpkitError, CheckpointError, ConfigurationError, RanksDisagreeError
from ampkit.precision.engine import MixedPrecision
from ampkit.precision.optimizer_state import load_optimizer_state
from ampkit.trainer.distributed import DistContext, all_gather, broadcast_from_main, ranks_listed
from ampkit.trainer.parallel import is_sharded
from ampkit.trainer.reshard import data_position, reshard_counters
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
    "check_shared_folder",
    "choose_resume_checkpoint",
    "find_resume_checkpoint",
    "full_weights",
    "set_aside_lost_metrics",
    "manifest_metadata",
    "restore",
    "small_state",
    "snapshot",
    "unshared_ranks",
]

log = logging.getLogger("ampkit")

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
    any mesh, also one the caller built), where only rank 0 receives them (the other ranks get
    an empty dict)."""
    if parts.sharded or is_sharded(parts.model):  # DTensors: gathered, never read one by one
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        weights = cast(
            dict[str, torch.Tensor],  # a full state dict: plain tensors
            get_model_state_dict(parts.model, options=_full_options(cpu_offload=True)),
        )
    else:
        weights = parts.model.state_dict()
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in weights.items()}


def small_state(parts: TrainingParts) -> dict[str, Any]:
    """Scheduler, engine, counters, data position and every rank's RNG. Collective."""
    rng: list[dict[str, Any] | None] = [get_rng_state()]
    if parts.dist.distributed:
        rng = [None] * parts.dist.world_size
        dist.all_gather_object(rng, get_rng_state())
    return {
        SCHEDULER: parts.scheduler.state_dict() if parts.scheduler is not None else None,
        ENGINE: parts.engine.state_dict(),
        TRAINER: parts.counters.state_dict(),
        RNG: rng,
        DATA: data_position(parts.counters, parts.engine, parts.batch_size, parts.dist.world_size),
    }


def manifest_metadata(parts: TrainingParts, state: dict[str, Any]) -> dict[str, Any]:
    """The manifest's facts about the run (precision, world size, strategy, data position)."""
    return {
        "precision": parts.engine.policy.precision,
        "world_size": parts.dist.world_size,
        "strategy": "fsdp" if parts.sharded else "replicated",
        "batch_size": parts.batch_size,
        "samples_consumed": state[DATA]["samples_consumed"],
        **({"config": parts.run_config} if parts.run_config is not None else {}),
    }


def snapshot(parts: TrainingParts) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict]:
    """Take a full-layout ``(weights, state, manifest metadata)``. Collective under torchrun."""
    weights = full_weights(parts)
    if parts.sharded:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        optim = get_optimizer_state_dict(
            parts.model, parts.optimizer, options=_full_options(cpu_offload=True)
        )
    else:
        optim = parts.optimizer.state_dict()
    state = {OPTIMIZER: optim, **small_state(parts)}
    return weights, state, manifest_metadata(parts, state)


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

"""The ``--out`` folder of ``ampkit train``: its lock, what an earlier run left in it, and what
this run may do there (start, replace the earlier run, or continue it).

:func:`open_run_folder` is called before any step, by the ``--nproc`` launcher before it
starts torchrun and by every worker, so a bad ``--out`` or ``--resume`` is refused once, with
one line, and nothing on disk changes when a run is refused:

* the folder is created and locked (:class:`~ampkit._lock.FolderLock`) for the whole run;
* a fresh run refuses a folder holding an earlier run's outputs unless ``--overwrite``;
* ``--resume auto`` picks the newest checkpoint that verifies; when the earlier run committed
  none (it was stopped before its first checkpoint) and left only ``metrics.jsonl``, that file
  is kept aside as ``metrics.lost-<time>.jsonl`` and the run starts fresh; it refuses to go on
  when there is no valid checkpoint but other earlier outputs exist (a finished run, or damaged
  checkpoints: nothing to continue from, and starting fresh would mix);
* the settings recorded in the checkpoint are compared with this run's, and those not given
  again (``--steps``, ``--log-every``, ``--checkpoint-every``, ``--keep-last``) are carried
  over (:mod:`ampkit.job.resume`);
* a resume of a run that has done all its steps and written its outputs does nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from ampkit._lock import LOCK_NAME, FolderLock
from ampkit.checkpoint import folder as folder
from ampkit.errors import AmpkitError, CheckpointError, ConfigurationError, StorageError
from ampkit.job.config import TrainConfig
from ampkit.job.resume import carry_over, check_resume_config
from ampkit.trainer.checkpointing.resume import set_aside_lost_metrics

__all__ = ["OUTPUTS", "RunPlan", "earlier_outputs", "open_run_folder"]

#: Files a run writes into ``--out``, besides ``checkpoints/`` and ``tensorboard/``.
OUTPUTS = ("metrics.jsonl", "summary.json", "model.safetensors")
METRICS = OUTPUTS[0]
CHECKPOINTS, TENSORBOARD = "checkpoints", "tensorboard"


@dataclass(frozen=True)
class RunPlan:
    """What the Trainer is told to do with the folder.

    Attributes:
        resume: a checkpoint folder to resume from, ``"auto"`` (no valid checkpoint and no
            earlier outputs: start fresh), or None (a fresh run).
        saved_lr: the learning rate recorded in the checkpoint, when ``--lr`` now differs.
        notes: what was decided, for the run's summary.
        config: the settings to run with: the given ones, with those carried over from the
            checkpoint on resume (:func:`~ampkit.job.resume.carry_over`); None: unchanged.
        finished: set when the run being resumed has already done its steps and written its
            outputs: the one line saying so ("already at step N of N; nothing to do"). The
            run then trains nothing and writes nothing.
    """

    resume: str | None = None
    saved_lr: float | None = None
    notes: list[str] = field(default_factory=list)
    config: TrainConfig | None = None
    finished: str | None = None


def earlier_outputs(out: Path) -> list[str]:
    """Names of what an earlier run left in ``out`` (empty files and lock files do not count)."""
    found = [name for name in OUTPUTS if (out / name).is_file() and (out / name).stat().st_size]
    if folder.find_checkpoints(out / CHECKPOINTS):
        found.append(f"{CHECKPOINTS}/")
    return found


def _make_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigurationError(f"--out: {out} is a file, not a folder. Pass a folder path.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"--out: cannot create the folder {out} ({exc.strerror or exc}). Pass a folder "
            "that exists or can be created, on a writable disk."
        ) from None


def _clear(out: Path, names: list[str]) -> None:
    """Delete the earlier run's outputs (``--overwrite``)."""
    try:
        for name in [*OUTPUTS, CHECKPOINTS, TENSORBOARD]:
            path = out / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    except OSError as exc:
        raise StorageError.from_os_error(
            exc, f"--overwrite: removing {', '.join(names)} in {out}"
        ) from None


def _plan(
    config: TrainConfig,
    out: Path,
    *,
    is_main: bool,
    data_sha256: Callable[[], str],
    precision: str,
    given: Collection[str] | None,
    world_size: int = 1,
) -> RunPlan:
    earlier = earlier_outputs(out)
    if config.resume is None:
        if not earlier:
            return RunPlan()
        if not config.overwrite:
            raise ConfigurationError(
                f"--out: {out} holds an earlier run ({', '.join(earlier)}), which this run "
                "would overwrite. Pass --resume auto to continue it, --overwrite to replace "
                "it, or another --out."
            )
        if is_main:
            _clear(out, earlier)
        return RunPlan(notes=[f"--overwrite: replaced the earlier run ({', '.join(earlier)})"])
    checkpoints = out / CHECKPOINTS
    notes: list[str] = []
    if config.resume == "auto":
        info, problems = folder.latest_valid_checkpoint(checkpoints)
        notes.extend(f"skipped a bad checkpoint: {problem}" for problem in problems)
        if info is None:
            files = [name for name in earlier if name != f"{CHECKPOINTS}/"]
            if files == [METRICS] and not folder.find_checkpoints(checkpoints):
                # the earlier run was stopped before its first checkpoint committed: its steps
                # are lost, nothing is to be continued, and starting over mixes nothing
                kept = set_aside_lost_metrics(out / METRICS) if is_main else None
                if kept is not None:
                    notes.append(
                        f"the earlier run in {out} committed no checkpoint, so this one starts "
                        f"fresh; its metrics.jsonl was kept as {kept.name}"
                    )
                return RunPlan(resume="auto", notes=notes)
            if files:
                damaged = f" ({folder.damaged_list(problems)})" if problems else ""
                raise CheckpointError(
                    f"--resume auto: {checkpoints} holds no valid checkpoint{damaged}, so the "
                    f"earlier run in {out} ({', '.join(files)}) cannot be continued. To start "
                    "over in this folder, run again with --overwrite instead of --resume (it "
                    "deletes the earlier run's outputs and checkpoints); to keep them, pass "
                    "another --out."
                )
            return RunPlan(resume="auto", notes=notes)
        path = info.path
    else:
        path = Path(config.resume)
        if not path.is_dir():
            raise ConfigurationError(
                f"--resume: {path} is not a checkpoint folder. Pass --resume auto (the newest "
                f"valid checkpoint in {checkpoints}) or one of its step-NNNNNNNN folders."
            )
    manifest = folder.verify_checkpoint(path)
    saved = manifest.get("config")
    config, carried = carry_over(saved if isinstance(saved, dict) else None, config, given)
    notes += carried
    notes += check_resume_config(
        saved if isinstance(saved, dict) else None,
        config,
        data_sha256=data_sha256(),
        precision=precision,
        saved_precision=manifest.get("precision"),
        checkpoint=str(path),
        world_size=world_size,
        saved_world_size=manifest.get("world_size"),
    )
    saved_lr = saved.get("lr") if isinstance(saved, dict) else None
    changed = saved_lr is not None and saved_lr != config.lr
    return RunPlan(
        resume=str(path),
        saved_lr=saved_lr if changed else None,
        notes=notes,
        config=config,
        finished=_finished(out, path, manifest["step"], config.steps),
    )


def _finished(out: Path, checkpoint: Path, step: int, steps: int) -> str | None:
    """The "nothing to do" line when the checkpoint is at (or past) the last step and the
    run's final outputs are there; else None (the resume writes what is missing)."""
    if step < steps or not all((out / name).is_file() for name in OUTPUTS):
        return None
    where = f"of {steps}" if step == steps else f"(past --steps {steps})"
    return (
        f"already at step {step} {where} in {out} ({checkpoint.name}); nothing to do. Pass a "
        "larger --steps to train further."
    )


@contextmanager
def open_run_folder(
    config: TrainConfig,
    *,
    is_main: bool,
    data_sha256: Callable[[], str],
    precision: str,
    lock_shared_with: int | None = None,
    given: Collection[str] | None = None,
    world_size: int = 1,
) -> Iterator[RunPlan]:
    """Create and lock ``config.out`` for the run (rank 0), check it, yield the plan.

    Without ``config.out`` the plan just passes ``config.resume`` on. Only rank 0
    (``is_main``) creates, locks or clears the folder; the checks run on every rank, so every
    rank refuses alike.

    Args:
        config: the run's settings.
        is_main: this process writes the outputs (rank 0, or the ``--nproc`` launcher).
        data_sha256: returns the SHA-256 of the run's text (called only when resuming).
        precision: the resolved precision of this run.
        lock_shared_with: the ``--nproc`` launcher's PID, which holds the lock for its workers.
        given: names of the settings given explicitly (the command line's flags); on resume
            the others of :data:`~ampkit.job.resume.CARRIED` come from the checkpoint
            (``RunPlan.config``). None: every setting is taken as given.
        world_size: the processes of this run; a resume on another number may change
            ``batch_size`` when the global batch stays the same.

    Raises:
        ConfigurationError: ``--out`` cannot be created, holds an earlier run (without
            ``--overwrite``), or the checkpoint was trained with other settings.
        RunInUseError: another run holds the folder.
        CheckpointError: ``--resume auto`` finds no valid checkpoint but earlier outputs, or
            the checkpoint named by ``--resume`` is missing or damaged.
        StorageError: the lock file cannot be written, or ``--overwrite`` cannot delete.
    """
    if not config.out:
        yield RunPlan(resume=config.resume)
        return
    out = Path(config.out)
    created = is_main and not out.exists()
    if is_main:
        _make_out(out)
    lock = FolderLock(out, flag="--out", shared_with=lock_shared_with) if is_main else None
    with lock if lock is not None else nullcontext():
        try:
            plan = _plan(
                config,
                out,
                is_main=is_main,
                data_sha256=data_sha256,
                precision=precision,
                given=given,
                world_size=world_size,
            )
        except AmpkitError:
            if created:  # a refused run leaves no trace, not even the folder it made
                (out / LOCK_NAME).unlink(missing_ok=True)
                out.rmdir()
            raise
        yield plan

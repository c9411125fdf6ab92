"""Trainer callbacks: the hooks, and the built-in progress bar, metrics file and TensorBoard.

A callback subclasses :class:`Callback` and overrides the hooks it needs. Hooks run on every
rank; check ``trainer.is_main`` before writing anything. Hooks see the trainer through
:class:`TrainerView`, the part of :class:`~ampkit.Trainer` that callbacks may read.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ampkit._files import append_record, atomic_write
from ampkit.errors import ConfigurationError, DataError, StorageError
from ampkit.trainer.evaluation import EvalResult
from ampkit.trainer.metrics import StepMetrics
from ampkit.trainer.result import FitResult

if TYPE_CHECKING:
    from torch import nn

    from ampkit.precision.engine import MixedPrecision, StepResult

T = TypeVar("T")

__all__ = [
    "Callback",
    "ConsoleLog",
    "MetricsFile",
    "NonFiniteMonitor",
    "ProgressBar",
    "TensorBoard",
    "TrainerView",
]

log = logging.getLogger("ampkit")


class TrainerView(Protocol):
    """What a callback may read from the trainer that calls it.

    Attributes:
        mp: the :class:`~ampkit.MixedPrecision` engine (policy, loss-scale stats).
        raw_model: the model as the user passed it (not wrapped by DDP/FSDP/compile).
    """

    mp: MixedPrecision
    raw_model: nn.Module

    @property
    def resumed_from(self) -> Path | None:
        """The checkpoint this run resumed from, or None for a fresh run."""
        ...

    @property
    def resume(self) -> str | Path | None:
        """What the user asked for: ``"auto"``, a checkpoint path, or None."""
        ...

    @property
    def max_steps(self) -> int:
        """The optimizer step training stops at (with ``epochs=``: derived from ``fit``'s
        data, known from ``on_fit_start`` on)."""
        ...

    @property
    def step(self) -> int:
        """Optimizer steps done."""
        ...

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0."""
        ...


class Callback:
    """Base class of Trainer callbacks; every hook is a no-op by default.

    Order of calls in ``fit``: ``on_fit_start`` once (after resume), then per optimizer step
    ``on_step_end`` (every step, cheap: no GPU sync), ``on_eval`` (at each evaluation of
    ``EvalConfig``, before that step's ``on_log``) and ``on_log`` (every ``log_every`` steps,
    every evaluated step and the last), ``on_checkpoint`` after each checkpoint is complete; then ``on_fit_end``
    when training ended normally or ``on_exception`` when it raised; ``close`` always, last.
    """

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Training is about to start (or resume at ``trainer.step``)."""

    def on_step_end(self, trainer: TrainerView, result: StepResult) -> None:
        """An optimizer step (or skipped step) has finished."""

    def on_eval(self, trainer: TrainerView, result: EvalResult) -> None:
        """An evaluation of ``EvalConfig.data`` has finished (every rank gets the same,
        all-reduced ``result``: step, mean loss, each metric's value)."""

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        """Metrics of a logged step are ready."""

    def on_checkpoint(self, trainer: TrainerView, path: Path) -> None:
        """A complete checkpoint was written to ``path`` (rank 0 writes)."""

    def on_fit_end(self, trainer: TrainerView, result: FitResult) -> None:
        """Training has ended normally."""

    def on_exception(self, trainer: TrainerView, error: BaseException) -> None:
        """Training stopped with ``error`` (which ``fit`` re-raises after the callbacks ran)."""

    def close(self) -> None:
        """Release what the callback holds (files, bars, hooks); called after every ``fit``."""


class MetricsFile(Callback):
    """Write each logged step to a JSON-lines file on rank 0.

    A fresh run refuses to overwrite an existing non-empty file; a resumed run keeps the rows
    up to the resumed step (rows written after the checkpoint, before a crash, are dropped,
    atomically) and appends after them. A torn last line (a row cut short by a crash or a full
    disk, written by an older version) is dropped on resume with a warning; damage anywhere
    else stops the resume.

    Each row is appended with a single ``write`` of the whole line and cut back if the disk
    fills up half-way (:func:`ampkit._files.append_record`), so the file only ever holds whole
    rows; it is fsynced at every checkpoint and when training ends.

    Attributes:
        dropped: what the resume dropped from the file (empty when nothing), for run notes.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self.dropped: list[str] = []

    def on_fit_start(self, trainer: TrainerView) -> None:
        if not trainer.is_main:
            return
        if trainer.resumed_from is None:
            if self.path.exists() and self.path.stat().st_size:
                if trainer.resume is None:
                    fix = (
                        "Resume that run (resume='auto', --resume auto) or write to another folder."
                    )
                else:  # asked to resume, but there was no valid checkpoint to resume from
                    fix = (
                        f"This run was asked to resume (resume={str(trainer.resume)!r}) but found "
                        "no valid checkpoint, so it starts fresh. Move the file away to start "
                        "over, or write to another folder."
                    )
                raise ConfigurationError(
                    f"metrics: {self.path} already holds a run's metrics and would be "
                    f"overwritten. {fix}"
                )
        elif self.path.exists():
            self._keep_rows_up_to(trainer.step)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise StorageError.from_os_error(exc, str(self.path)) from None

    def _keep_rows_up_to(self, step: int) -> None:
        """Rewrite the file with the rows of steps <= ``step`` (atomically)."""
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        if tail.strip():  # the last row never got its newline: cut short
            self.dropped.append(f"a torn last row ({len(tail)} bytes) of {self.path}")
        kept = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                if number == len(lines) and not tail.strip():  # a torn row, newline and all
                    self.dropped.append(f"a torn last row ({len(line)} bytes) of {self.path}")
                    continue
                raise DataError(
                    f"metrics: line {number} of {self.path} is not JSON, and only a torn last "
                    "line is repaired on resume. Move the file away (its rows are then not "
                    "kept) and resume again."
                ) from None
            if not isinstance(row, dict) or row.get("step", 0) <= step:
                kept.append(line + b"\n")
        for message in self.dropped:
            log.warning("resume dropped %s", message)
        try:
            atomic_write(self.path, b"".join(kept))
        except OSError as exc:
            raise StorageError.from_os_error(
                exc, str(self.path), "The file is unchanged; free some space and resume again."
            ) from None

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        if self._fd is None:
            return
        try:
            append_record(self._fd, (metrics.to_json() + "\n").encode())
        except OSError as exc:
            raise StorageError.from_os_error(
                exc,
                f"step {metrics.step}'s row to {self.path}",
                "The rows written before it are intact; free some space, then continue the "
                "run from its last checkpoint.",
            ) from None

    def on_checkpoint(self, trainer: TrainerView, path: Path) -> None:
        if self._fd is not None:
            os.fsync(self._fd)  # the rows up to the checkpoint's step survive a power cut

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


class ProgressBar(Callback):
    """A tqdm bar on rank 0 with loss, throughput and (fp16) the loss scale."""

    def __init__(self) -> None:
        self._bar: Any = None

    def on_fit_start(self, trainer: TrainerView) -> None:
        if trainer.is_main:
            from tqdm import tqdm

            self._bar = tqdm(
                total=trainer.max_steps,
                initial=trainer.step,
                unit="step",
                dynamic_ncols=True,
                leave=False,
            )

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        if self._bar is None:
            return
        rate = metrics.tokens_per_s if metrics.tokens_per_s is not None else metrics.samples_per_s
        unit = "tok/s" if metrics.tokens_per_s is not None else "samples/s"
        postfix = {"loss": f"{metrics.loss:.3f}", unit: f"{rate:,.0f}"}
        if trainer.mp.policy.uses_scaler:
            postfix["scale"] = f"{metrics.scale:g}"
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(metrics.step - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class ConsoleLog(Callback):
    """The Trainer's default console output (rank 0, to ``stream``, default stderr): with
    ``lines``, one line per logged step (``step 10/300  loss 2.3456  lr 2.0e-03  grad_norm
    0.812  tokens/s 24,270``, plus the loss scale under fp16 and ``eval_loss`` when evaluated),
    and at the end of ``fit`` a summary of the run. ``LoggingConfig(console=False)`` turns it
    off."""

    def __init__(self, lines: bool = True, stream: Any = None) -> None:
        self.lines, self.stream = lines, stream

    def _write(self, text: str) -> None:
        import sys

        stream = self.stream or sys.stderr
        stream.write(text + "\n")
        stream.flush()

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        if not (self.lines and trainer.is_main):
            return
        parts = [
            f"step {metrics.step}/{trainer.max_steps}",
            f"loss {metrics.loss:.4f}",
            f"lr {metrics.lr:.1e}",
        ]
        if metrics.grad_norm is not None:
            parts.append(f"grad_norm {metrics.grad_norm:.3g}")
        if trainer.mp.policy.uses_scaler:
            parts.append(f"scale {metrics.scale:g}")
        if metrics.eval_loss is not None:
            parts.append(f"eval_loss {metrics.eval_loss:.4f}")
        if metrics.tokens_per_s is not None:
            parts.append(f"tokens/s {metrics.tokens_per_s:,.0f}")
        else:
            parts.append(f"samples/s {metrics.samples_per_s:,.0f}")
        self._write("  ".join(parts))

    def on_fit_end(self, trainer: TrainerView, result: FitResult) -> None:
        if not trainer.is_main:
            return
        rate = (
            f"{result.tokens_per_s:,.0f} tokens/s"
            if result.tokens_per_s is not None
            else f"{result.samples_per_s:,.0f} samples/s"
        )
        rows = [
            ("precision", f"{result.precision} on {result.device}"),
            ("why", result.reason),
            ("steps", f"{result.steps} ({result.skipped_steps} skipped)"),
            ("final loss", f"{result.final_loss:.4f}"),
            ("throughput", f"{rate} over {result.wall_s:.1f} s"),
            (
                "peak memory",
                f"{result.peak_memory_bytes / 2**20:,.0f} MiB ({result.peak_memory_kind})",
            ),
            *(("note", note) for note in result.notes),
        ]
        width = max(len(k) for k, _ in rows)
        self._write("\n".join(f"{k.rjust(width)}  {v}" for k, v in rows))


class Tracker(Callback):
    """A callback that sends what training logs somewhere else (TensorBoard, MLflow, W&B): on
    its first failure (a folder deleted or read-only, a server down, a full disk) it warns
    once (``RuntimeWarning``, naming the tracker and the error) and sends nothing more, and
    training goes on."""

    name = "tracker"

    def __init__(self) -> None:
        self.failed: str | None = None  # the first error, once one happened
        self._active = False

    def _send(self, what: str, call: Callable[[], T]) -> T | None:
        if self.failed is not None:
            return None
        try:
            return call()
        except Exception as exc:  # an observer never stops training
            self.failed = f"{type(exc).__name__}: {exc}"
            self._active = False
            warnings.warn(
                f"{self.name}: {what} failed ({self.failed}); nothing more is sent to it in "
                "this run, and training goes on (metrics.jsonl, when written, keeps every row).",
                RuntimeWarning,
                stacklevel=2,
            )
            return None


class TensorBoard(Tracker):
    """Log loss, learning rate, loss scale, throughput and the evaluations (``eval/loss``,
    ``eval/<metric>``) to TensorBoard (rank 0).

    Needs the ``tensorboard`` package; :meth:`available` says whether it is installed. A
    failure to write (the folder deleted mid-run, read-only, a file in its place) warns once
    and training goes on (:class:`Tracker`).
    """

    def __init__(self, log_dir: str | Path) -> None:
        super().__init__()
        self.log_dir = Path(log_dir)
        self._writer: Any = None

    @staticmethod
    def available() -> bool:
        """Whether ``torch.utils.tensorboard`` can be used here."""
        import importlib.util

        return importlib.util.find_spec("tensorboard") is not None

    name = "TensorBoard"

    def on_fit_start(self, trainer: TrainerView) -> None:
        if trainer.is_main:
            from torch.utils.tensorboard import SummaryWriter

            def start() -> None:
                self._writer = SummaryWriter(str(self.log_dir))
                self._active = True

            self._send(f"opening {self.log_dir}", start)

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        if not self._active:
            return
        writer = self._writer
        values = {f"train/{n}": getattr(metrics, n) for n in self._TRAIN}
        values["train/grad_norm"] = metrics.grad_norm
        values["eval/loss"] = metrics.eval_loss
        values.update({f"eval/{n}": v for n, v in (metrics.eval_metrics or {}).items()})

        def send() -> None:
            for tag, value in values.items():
                if value is not None:
                    writer.add_scalar(tag, value, metrics.step)
            # the event file is written by a background thread, which reports a failure (the
            # folder deleted, read-only, a file in its place) at the next flush
            writer.flush()

        self._send(f"logging step {metrics.step} to {self.log_dir}", send)

    _TRAIN = ("loss", "lr", "scale", "step_time_ms", "samples_per_s")

    def close(self) -> None:
        writer, self._writer, self._active = self._writer, None, False
        if writer is not None and self.failed is None:
            self._send(f"closing {self.log_dir}", writer.close)


class NonFiniteMonitor(Callback):
    """Watch training for the first inf/NaN and name the module that made it.

    Wraps :func:`ampkit.detect_nonfinite` around ``fit``: the checks of each step are resolved
    at its end (one sync per step), ``monitor.first`` holds the first
    :class:`~ampkit.Finding`, and with ``strict=True`` training stops with
    :class:`~ampkit.NonFiniteError` at the step that produced it.
    """

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.probe: Any = None

    @property
    def first(self) -> Any:
        """The first inf/NaN as a Finding, or None."""
        return None if self.probe is None else self.probe.first

    def on_fit_start(self, trainer: TrainerView) -> None:
        from ampkit.doctor import detect_nonfinite

        self.probe = detect_nonfinite(trainer.raw_model, strict=self.strict).start()

    def on_step_end(self, trainer: TrainerView, result: StepResult) -> None:
        self.probe.on_step()

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()

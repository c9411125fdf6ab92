"""Exceptions and warnings raised by ampkit.

Every error ampkit raises on purpose derives from :class:`AmpkitError`. Library code only
raises; the command line renders an error as one line and exits with ``exit_code``.

Messages follow one shape: what failed, what was seen, what is allowed, how to fix it.
"""

from __future__ import annotations

__all__ = [
    "AmpkitError",
    "CheckpointError",
    "ConfigurationError",
    "DataError",
    "ExportError",
    "KeywordError",
    "MissingDependencyError",
    "NonFiniteError",
    "NonFiniteTrainingError",
    "NonFiniteWeightsError",
    "ParityError",
    "PrecisionWarning",
    "RanksDisagreeError",
    "RunInUseError",
    "ScalerStateError",
    "StorageError",
    "TrainingInterrupted",
    "UnsupportedPrecisionError",
]


class AmpkitError(Exception):
    """Base class of every error ampkit raises on purpose.

    Attributes:
        exit_code: the process exit status the command line uses for this error.
        argument: the argument the message starts with (``"model"`` for ``"model: ..."``), or
            None. The command line shows it as its flag (``--model: ...``); library messages
            name arguments, never flags.
    """

    exit_code: int = 1
    argument: str | None = None

    def __init__(self, *args: object, argument: str | None = None) -> None:
        super().__init__(*args)
        if argument is not None:
            self.argument = argument


class ConfigurationError(AmpkitError, ValueError):
    """An argument or option has a value ampkit cannot use (a user mistake)."""

    exit_code = 2


class KeywordError(AmpkitError, TypeError):
    """A keyword the class or function does not take: unknown (the message suggests the
    nearest valid name) or moved into a config or a mode object (the message shows the new
    form). A :class:`TypeError`, as Python's own ``unexpected keyword argument`` is, so
    ``except TypeError`` still catches it.

    Attributes:
        keyword: the keyword as the caller spelled it.
        suggestion: the valid name or the new form the message proposes, or None.
    """

    exit_code = 2

    def __init__(self, message: str, *, keyword: str = "", suggestion: str | None = None):
        super().__init__(message)
        self.keyword, self.suggestion = keyword, suggestion


class UnsupportedPrecisionError(ConfigurationError):
    """The requested precision cannot run on the requested device."""


class DataError(AmpkitError, ValueError):
    """Training data is missing, empty, binary or too small for the requested batch."""

    exit_code = 2


class CheckpointError(AmpkitError, RuntimeError):
    """A checkpoint is missing, incomplete, corrupt or does not fit the model."""


class NonFiniteWeightsError(CheckpointError):
    """Weights about to be saved (a checkpoint, the final weights) hold inf/NaN; nothing was
    written, so the newest checkpoint on disk stays a finite one."""


class ScalerStateError(AmpkitError, RuntimeError):
    """Loss-scaler methods were called in an order that would train wrongly."""


class NonFiniteTrainingError(AmpkitError, RuntimeError):
    """Training kept producing inf/NaN gradients even at the smallest loss scale."""


class NonFiniteError(AmpkitError, RuntimeError):
    """A module produced the first inf/NaN of a run (raised by a strict non-finite probe).

    Attributes:
        finding: the :class:`~ampkit.doctor.report.Finding` naming the module, phase, dtype,
            input ranges and step.
    """

    def __init__(self, message: str, finding: object = None) -> None:
        super().__init__(message)
        self.finding = finding


class PrecisionWarning(UserWarning):
    """A precision choice that works but costs speed or accuracy (e.g. fp16 on a CPU)."""


class MissingDependencyError(AmpkitError, ImportError):
    """An optional feature needs a package that is not installed (the message names the extra)."""

    exit_code = 2


class ExportError(AmpkitError, RuntimeError):
    """A model could not be exported: an op with no ONNX translation, a dynamic dimension the
    exporter specialised, or a graph whose node inputs disagree in dtype (the message names the
    op, the dimension or the node)."""


class ParityError(ExportError):
    """The exported model's outputs are non-finite or outside the documented tolerance.

    Attributes:
        result: the :class:`~ampkit.deploy.ExportResult` with the parity table (nothing was
            written to the output path).
    """

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class RunInUseError(AmpkitError, RuntimeError):
    """Another live process holds the lock on a run folder (two runs would corrupt each other).

    Attributes:
        pid: the process holding the lock, when it could be read (else None).
    """

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class StorageError(AmpkitError, OSError):
    """A file could not be written: the disk is full, over quota, read-only or not writable.

    Nothing half-written is left behind where it was raised (the writer removed or truncated it).
    """

    @classmethod
    def from_os_error(cls, exc: OSError, writing: str, fix: str = "") -> StorageError:
        """An error for ``exc`` raised while writing ``writing``, with what to do about it."""
        import errno

        reason = {
            errno.ENOSPC: "the disk is full",
            errno.EDQUOT: "the disk quota is exhausted",
            errno.EROFS: "the file system is read-only",
            errno.EACCES: "permission denied",
            errno.EPERM: "permission denied",
        }.get(exc.errno or 0, exc.strerror or str(exc))
        advice = fix or "Free some space or write somewhere else, then run the command again."
        return cls(f"writing {writing} failed: {reason} ({exc.strerror or exc}). {advice}")


class TrainingInterrupted(AmpkitError):
    """Training stopped on a signal (SIGTERM, SIGUSR1, SIGINT, SIGHUP) after finishing the
    optimizer step it was in, with a checkpoint of that step written on every rank.

    The exit status is ``128 + signal``, as for a process the signal had ended.

    Attributes:
        step: the optimizer step training stopped after.
        checkpoint: the checkpoint holding that step (None: the run writes no checkpoints, so
            the steps done are lost).
        signal: the signal's number.
    """

    def __init__(self, message: str, *, step: int, checkpoint: str | None, signal: int) -> None:
        super().__init__(message)
        self.step, self.checkpoint, self.signal = step, checkpoint, signal
        self.exit_code = 128 + signal

    @property
    def signal_name(self) -> str:
        """The signal's name (``SIGTERM``)."""
        import signal as signals

        try:
            return signals.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"


class RanksDisagreeError(AmpkitError, RuntimeError):
    """The processes of a distributed run see different states (the checkpoint to resume, the
    step they reached) and would silently train apart; every rank raises it alike."""

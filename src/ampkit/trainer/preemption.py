"""Stopping on a signal without losing work: the handlers ``Trainer.fit`` installs with
``handle_signals=True``, and the vote that makes every rank stop at the same step.

SIGTERM (what SLURM, Kubernetes and torchrun send), SIGUSR1 (SLURM's ``--signal``), SIGINT
(Ctrl-C) and SIGHUP only record that a stop was asked for; the loop finishes the optimizer
step it is in, every rank takes part in one vote per step, and once the vote says stop, every
rank writes a checkpoint of the same step and ``fit`` raises
:class:`~ampkit.errors.TrainingInterrupted`.

The vote costs no synchronisation of its own: each step starts an asynchronous all-reduce
(MAX) of this rank's flag and reads the result of the previous step's one, so all ranks stop
one step after the first of them saw the signal, and none waits for the reduction it started.

A second signal while stopping (the checkpoint is being written) ends the process at once,
as the signal would without a handler: a checkpoint is written into a temporary folder and
renamed when complete, so nothing on disk is left half-written. The same signal repeated
within :data:`REPEAT_GRACE_S` counts once: under ``ampkit train --nproc`` a scheduler's
SIGTERM may reach a worker both directly and forwarded by the torchrun agent.

The handlers are installed for ``fit`` only and the ones in place before are restored after;
they can only be installed from the main thread (Python's rule for signal handlers).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType, TracebackType
from typing import Any

import torch
import torch.distributed as dist

from ampkit.trainer.distributed import DistContext

__all__ = ["REPEAT_GRACE_S", "STOP_SIGNALS", "StopSignals", "StopVote"]

log = logging.getLogger("ampkit")

#: The signals that stop training at the end of the current step.
STOP_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGUSR1", "SIGINT", "SIGHUP")
    if hasattr(signal, name)
)
#: Seconds within which a repeat of the first signal counts as the same request.
REPEAT_GRACE_S = 2.0


class StopSignals:
    """A context manager that turns the :data:`STOP_SIGNALS` into a stop request.

    A further signal (another one, or the same after :data:`REPEAT_GRACE_S`) ends the
    process at once.

    Attributes:
        received: the first signal received (None: none yet).
        installed: whether the handlers are in place (False outside the main thread).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.installed = False
        self._at = 0.0
        self._previous: dict[int, Any] = {}

    def install(self) -> StopSignals:
        """Put the handlers in place (remembering the ones they replace); returns self."""
        if threading.current_thread() is not threading.main_thread():
            log.warning(
                "handle_signals: fit() runs outside the main thread, where Python cannot "
                "install signal handlers; a signal ends training without a checkpoint."
            )
            return self
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        self.installed = True
        return self

    def restore(self) -> None:
        """Put back the handlers that were in place before :meth:`install` (idempotent)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()
        self.installed = False

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.received is None:
            self.received, self._at = signum, now
            return
        if signum == self.received and now - self._at < REPEAT_GRACE_S:
            return  # the same request, delivered twice
        # at once, as without a handler; checkpoints are atomic, so nothing is corrupted
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


class StopVote:
    """Every rank's stop flag, reduced once per step without waiting (see the module doc).

    ``cast(signal)`` after each optimizer step returns the signal all ranks agreed to stop on
    (the largest number any rank received by the previous step), or None. In one process it
    returns the local signal at once.
    """

    def __init__(self, ctx: DistContext, device: torch.device) -> None:
        self.ctx, self.device = ctx, device
        self._tensor: torch.Tensor | None = None
        self._work: Any = None

    def cast(self, local: int | None) -> int | None:
        """This rank's vote for the step just finished; the agreed signal, or None."""
        if not self.ctx.distributed:
            return local
        decided = self.drain()
        self._tensor = torch.tensor([local or 0], dtype=torch.int32, device=self.device)
        self._work = dist.all_reduce(self._tensor, op=dist.ReduceOp.MAX, async_op=True)
        return decided

    def drain(self) -> int | None:
        """Wait for the vote in flight (if any); its signal, or None. Every rank calls it at
        the same step (the end of the loop), so no collective is left pending."""
        if self._work is None or self._tensor is None:
            return None
        self._work.wait()
        value = int(self._tensor.item())
        self._work = self._tensor = None
        return value or None

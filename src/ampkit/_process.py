"""Ties between the processes of ``ampkit train --nproc N``: who launched whom, and dying
with one's parent.

The ``ampkit train`` launcher starts the torchrun agent, which starts the workers. The
launcher's PID travels to both in :data:`LAUNCHER_PID`, the agent's to the workers in
:data:`AGENT_PID`; each process asks to be signalled when its parent dies
(:func:`die_with_parent`), so that killing any of them, SIGKILL included, leaves no orphan.
No torch import: the launcher uses this before torch is loaded.
"""

from __future__ import annotations

import os
import sys
import threading
import time

__all__ = ["AGENT_PID", "LAUNCHER_PID", "die_with_parent", "launched_by_ampkit", "pid_alive"]

#: Environment variables that tie the processes together.
LAUNCHER_PID, AGENT_PID = "AMPKIT_LAUNCHER_PID", "AMPKIT_AGENT_PID"
_PR_SET_PDEATHSIG = 1


def launched_by_ampkit() -> int | None:
    """The launcher's PID when this process is a torchrun worker of ``ampkit train --nproc``."""
    pid = os.environ.get(LAUNCHER_PID, "")
    return int(pid) if pid.isdigit() and "LOCAL_RANK" in os.environ else None


def die_with_parent(parent_pid: int, sig: int) -> None:
    """Have this process receive ``sig`` when its parent (``parent_pid``) exits.

    Linux: ``prctl(PR_SET_PDEATHSIG)``; elsewhere, or should it fail, a daemon thread polls
    the parent once a second. If the parent is already gone, ``sig`` is sent at once.
    """
    armed = False
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    if not armed:

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os.kill(os.getpid(), sig)

        threading.Thread(target=watch, name="ampkit-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but belongs to another user
        return True
    return True

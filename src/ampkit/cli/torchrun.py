"""``ampkit train --nproc N``: run torchrun so that no process outlives the command.

Three processes are involved: the ``ampkit train`` launcher, the torchrun agent (run in-process
by ``python -m ampkit.cli.torchrun``) and the N workers. Each one is tied to its parent:

* the launcher starts the agent in a process group of its own (a Ctrl-C in the terminal
  reaches the launcher only) and forwards SIGINT, SIGTERM and SIGHUP to that group; the agent
  stops its workers and exits, and the launcher exits with ``128 + signal``;
* the agent asks the kernel for SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``), so a
  SIGKILLed launcher still takes the agent and, through it, the workers down;
* each worker asks for SIGKILL when the agent dies, for the case where the agent itself is
  killed and cannot stop them.

Where ``PR_SET_PDEATHSIG`` does not exist (not Linux) a watchdog thread polls the parent.
The agent reports a failed worker with its exit status only (the worker printed its own error
line); torchrun's tracebacks and log lines are not shown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ampkit._process import AGENT_PID, LAUNCHER_PID, die_with_parent

__all__ = ["LaunchResult", "launch"]

_FORWARDED = tuple(
    getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)
)


@dataclass(frozen=True)
class LaunchResult:
    """How a torchrun job ended.

    Attributes:
        status: the exit status for the command (``128 + signal`` when stopped by one).
        forwarded: the signal this process received and forwarded, or None.
        agent_signal: the signal that killed the torchrun agent itself, or None.
    """

    status: int
    forwarded: int | None = None
    agent_signal: int | None = None


def launch(nproc: int, args: Sequence[str]) -> LaunchResult:
    """Run ``ampkit <args>`` under torchrun with ``nproc`` workers and wait for it.

    SIGINT, SIGTERM and SIGHUP received meanwhile are forwarded to the agent's process group.
    """
    env = {**os.environ, LAUNCHER_PID: str(os.getpid())}
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default for N > 1, minus its banner
    command = [
        sys.executable,
        "-m",
        "ampkit.cli.torchrun",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "ampkit",
        *args,
    ]
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):  # the agent has already exited
            os.killpg(agent.pid, signum)

    agent = subprocess.Popen(command, env=env, start_new_session=True)
    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        status = agent.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        return LaunchResult(128 + received[0], forwarded=received[0])
    if status < 0:
        return LaunchResult(128 - status, agent_signal=-status)
    return LaunchResult(status)


def _exit_status(failures: dict[int, object]) -> tuple[int, str | None]:
    """The job's exit status from torchrun's failures, and a line to print when no worker
    printed one (a worker killed by a signal)."""
    rank = min(failures)
    failure = failures[rank]
    code = int(getattr(failure, "exitcode", 1))
    if code >= 0:
        return code or 1, None
    name = signal.Signals(-code).name
    return 128 - code, (
        f"ampkit: error: --nproc: rank {rank} (PID {getattr(failure, 'pid', '?')}) was killed "
        f"by {name}; the other workers were stopped. Continue from the last checkpoint with "
        "--resume auto."
    )


def _agent(argv: list[str]) -> int:
    """The torchrun agent, tied to the launcher; returns the exit status."""
    launcher = int(os.environ[LAUNCHER_PID])
    die_with_parent(launcher, signal.SIGTERM)
    os.environ[AGENT_PID] = str(os.getpid())
    import logging

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    for name in list(logging.root.manager.loggerDict):  # torchrun's log lines; this process only
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)

    try:
        torchrun(argv)
    except ChildFailedError as exc:
        status, line = _exit_status(dict(exc.failures))
        if line:
            print(line, file=sys.stderr)
        return status
    except SignalException as exc:
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(_agent(sys.argv[1:]))

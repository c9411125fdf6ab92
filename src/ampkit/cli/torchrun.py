"""``ampkit train --nproc N [--nnodes M ...]``: run torchrun so that no process outlives the
command, and say in one line how a job ended.

Three processes are involved on each node: the ``ampkit train`` launcher, the torchrun agent
(run in-process by ``python -m ampkit.cli.torchrun``) and the N workers. Each one is tied to
its parent:

* the launcher starts the agent in a process group of its own (a Ctrl-C in the terminal
  reaches the launcher only) and forwards SIGINT, SIGTERM, SIGHUP and SIGUSR1 to that group;
  the agent passes the signal on to its workers, which finish their step, write a checkpoint
  and exit (``handle_signals``; the agent waits for them up to ``shutdown_timeout`` seconds),
  and the launcher exits with ``128 + signal``, printing the line rank 0 left for it in
  :data:`REPORT_FILE` ("stopped by SIGTERM at step N; checkpoint written to ...");
* the agent asks the kernel for SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``), so a
  SIGKILLed launcher still takes the agent and, through it, the workers down;
* each worker asks for SIGKILL when the agent dies, for the case where the agent itself is
  killed and cannot stop them.

Where ``PR_SET_PDEATHSIG`` does not exist (not Linux) a watchdog thread polls the parent.

A failed job is one line: the rank that failed first (torchrun's failure records, earliest
first; a worker that only lost its connection to a failed peer exits with :data:`PEER_LOST`
and is never blamed), its signal or exit status, and the exit status ``128 + signal`` of that
rank. torchrun's tracebacks and log lines are not shown.

Multi-node: ``--nnodes M --node-rank R --master-addr HOST --master-port P`` (torchrun's static
rendezvous) or ``--rdzv-endpoint HOST:PORT --rdzv-id ID`` (its c10d rendezvous), passed to
torchrun under its own names; under SLURM (:func:`slurm_launch`) the same from the
environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ampkit._process import AGENT_PID, LAUNCHER_PID, die_with_parent

__all__ = [
    "PEER_LOST",
    "REPORT_FILE",
    "LaunchResult",
    "LaunchSpec",
    "expand_nodelist",
    "launch",
    "report_to_launcher",
    "slurm_launch",
]

_FORWARDED = tuple(
    getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1") if hasattr(signal, n)
)
#: The signals the torchrun agent passes on to its workers (its own default plus SLURM's).
_AGENT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
#: The exit status of a worker that failed only because a peer process went away.
PEER_LOST = 86
#: Environment variable naming the file where rank 0 leaves the line the launcher prints.
REPORT_FILE = "AMPKIT_REPORT_FILE"


@dataclass(frozen=True)
class LaunchSpec:
    """How torchrun is started on this node (torchrun's own options and meaning).

    Attributes:
        nproc: worker processes on this node (``--nproc_per_node``).
        nnodes: nodes in the job; 1 (and no rendezvous endpoint): ``--standalone``.
        node_rank: this node's rank, with the static rendezvous.
        master_addr, master_port: rank 0's node and port, with the static rendezvous.
        rdzv_endpoint, rdzv_id: the c10d rendezvous (``HOST:PORT``, a job id) instead.
        shutdown_timeout: seconds the agent waits for its workers to stop (and checkpoint)
            after passing a signal on, before it kills them.
    """

    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    shutdown_timeout: int = 600

    @property
    def world_size(self) -> int:
        """Processes in the whole job."""
        return self.nproc * self.nnodes

    def torchrun_args(self) -> list[str]:
        """torchrun's arguments for this spec (before the entry point)."""
        args = [f"--nproc_per_node={self.nproc}"]
        if self.rdzv_endpoint:
            return [
                *args,
                f"--nnodes={self.nnodes}",
                "--rdzv_backend=c10d",
                f"--rdzv_endpoint={self.rdzv_endpoint}",
                f"--rdzv_id={self.rdzv_id or 'ampkit'}",
            ]
        if self.nnodes == 1:
            return ["--standalone", *args]
        return [
            *args,
            f"--nnodes={self.nnodes}",
            f"--node_rank={self.node_rank}",
            f"--master_addr={self.master_addr or '127.0.0.1'}",
            f"--master_port={self.master_port or 29500}",
        ]


def expand_nodelist(nodelist: str) -> list[str]:
    """The host names of a SLURM node list: ``node[01-03,07],gpu5`` is ``node01``, ``node02``,
    ``node03``, ``node07``, ``gpu5`` (ranges keep their zero padding).

    Raises:
        ValueError: the list is malformed (an empty name, an unbalanced bracket, a range that
            is not numeric).
    """
    items, item, depth = [], "", 0
    for ch in nodelist.strip():
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise ValueError(f"malformed SLURM node list {nodelist!r}")
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    if depth:
        raise ValueError(f"malformed SLURM node list {nodelist!r}")
    hosts: list[str] = []
    for item in items:
        prefix, bracket, rest = item.partition("[")
        ranges, _, suffix = rest.partition("]")
        if not item or "]" in prefix or "[" in suffix or "]" in suffix:
            raise ValueError(f"malformed SLURM node list {nodelist!r}")
        if not bracket:
            hosts.append(item)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not low.isdigit() or not (high or low).isdigit() or int(high or low) < int(low):
                raise ValueError(f"malformed SLURM node list {nodelist!r}")
            for number in range(int(low), int(high or low) + 1):
                hosts.append(f"{prefix}{number:0{len(low)}d}{suffix}")
    return hosts


def slurm_launch(env: Mapping[str, str], nproc: int) -> LaunchSpec | None:
    """The multi-node spec of a SLURM job step with one ``ampkit train`` task per node (as
    ``srun ampkit train --nproc N ...`` in an sbatch script starts it), or None outside SLURM
    or on one node.

    ``SLURM_NNODES`` nodes, this node ``SLURM_NODEID``, the master the first host of
    ``SLURM_JOB_NODELIST`` and the port derived from ``SLURM_JOB_ID`` (every node computes
    the same one).

    Raises:
        ValueError: more than one task per node (``SLURM_NTASKS`` != ``SLURM_NNODES``), or a
            variable that cannot be read.
    """
    if "SLURM_JOB_ID" not in env or "SLURM_NNODES" not in env:
        return None
    nnodes = int(env["SLURM_NNODES"])
    if nnodes <= 1:
        return None
    tasks = int(env.get("SLURM_NTASKS", nnodes))
    if tasks != nnodes:
        raise ValueError(
            f"SLURM runs {tasks} tasks on {nnodes} nodes; ampkit starts the processes of a "
            "node itself, so run one task per node (srun --ntasks-per-node=1)"
        )
    node = int(env.get("SLURM_NODEID", env.get("SLURM_PROCID", "0")))
    hosts = expand_nodelist(env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "")))
    if not hosts:
        raise ValueError("SLURM_JOB_NODELIST is empty")
    digits = "".join(ch for ch in env["SLURM_JOB_ID"] if ch.isdigit()) or "0"
    return LaunchSpec(
        nproc=nproc,
        nnodes=nnodes,
        node_rank=node,
        master_addr=hosts[0],
        master_port=20000 + int(digits) % 10000,
    )


@dataclass(frozen=True)
class LaunchResult:
    """How a torchrun job ended.

    Attributes:
        status: the exit status for the command (``128 + signal`` when stopped by one).
        forwarded: the signal this process received and forwarded, or None.
        agent_signal: the signal that killed the torchrun agent itself, or None.
        report: the line rank 0 left for the launcher (a stop on a signal), or None.
    """

    status: int
    forwarded: int | None = None
    agent_signal: int | None = None
    report: str | None = None


def launch(spec: LaunchSpec, args: Sequence[str]) -> LaunchResult:
    """Run ``ampkit <args>`` under torchrun as ``spec`` says and wait for it.

    SIGINT, SIGTERM, SIGHUP and SIGUSR1 received meanwhile are forwarded to the agent's
    process group.
    """
    with tempfile.TemporaryDirectory(prefix="ampkit-launch-") as scratch:
        report = Path(scratch) / "report"
        env = {
            **os.environ,
            LAUNCHER_PID: str(os.getpid()),
            REPORT_FILE: str(report),
            "PET_SIGNALS_TO_HANDLE": _AGENT_SIGNALS,
            "PET_SHUTDOWN_TIMEOUT": str(spec.shutdown_timeout),
        }
        env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default for N > 1, minus its banner
        command = [
            sys.executable,
            "-m",
            "ampkit.cli.torchrun",
            *spec.torchrun_args(),
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
        line = report.read_text(encoding="utf-8").strip() if report.is_file() else None
    if received:
        return LaunchResult(128 + received[0], forwarded=received[0], report=line or None)
    if status < 0:
        return LaunchResult(128 - status, agent_signal=-status)
    return LaunchResult(status, report=line or None)


def report_to_launcher(line: str) -> bool:
    """Leave ``line`` for the ``--nproc`` launcher to print (rank 0 of an ampkit launch);
    False when there is no launcher to read it (then print it yourself)."""
    path = os.environ.get(REPORT_FILE)
    if not path or os.environ.get(LAUNCHER_PID) is None:
        return False
    try:
        Path(path).write_text(line + "\n", encoding="utf-8")
    except OSError:
        return False
    return True


def write_error_file(message: str) -> None:
    """Record this worker's error where torchrun reads it (``TORCHELASTIC_ERROR_FILE``), so the
    launcher can name it when this rank failed first."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    with contextlib.suppress(OSError):
        Path(path).write_text(
            json.dumps({"message": message, "timestamp": int(time.time())}), encoding="utf-8"
        )


def _first_failure(failures: Mapping[int, object]) -> tuple[int, object] | None:
    """The rank that failed first and its record: the earliest of torchrun's failure records
    that is not a lost connection (ties: a rank not stopped by the agent's SIGTERM, then the
    lowest rank); None when every rank only lost its connection."""
    own = {r: f for r, f in failures.items() if getattr(f, "exitcode", 1) != PEER_LOST}
    if not own:
        return None

    def order(rank: int) -> tuple[int, int, int]:
        failure = own[rank]
        stopped = int(getattr(failure, "exitcode", 1) == -signal.SIGTERM)
        return int(getattr(failure, "timestamp", 0)), stopped, rank

    rank = min(own, key=order)
    return rank, own[rank]


#: Exit statuses of a worker that stopped on a signal at a step boundary, its checkpoint
#: written (``TrainingInterrupted``: 128 + SIGTERM, SIGUSR1, SIGINT or SIGHUP).
_STOPPED = {128 + s for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)}


def _stopped_together(failures: Mapping[int, object]) -> int | None:
    """The exit status of a job whose ranks stopped on a signal together: every record is a
    rank that stopped at a step boundary, one the agent's SIGTERM then ended (a rank still
    finishing when another had exited), or a lost connection; None otherwise."""
    codes = [int(getattr(f, "exitcode", 1)) for f in failures.values()]
    stopped = [c for c in codes if c in _STOPPED]
    if stopped and all(c in _STOPPED or c in (-signal.SIGTERM, PEER_LOST) for c in codes):
        return stopped[0]
    return None


def _exit_status(failures: Mapping[int, object]) -> tuple[int, str | None]:
    """The job's exit status from torchrun's failures, and the line to print (None: rank 0
    printed its own error line, or the ranks stopped on a signal together: rank 0's stop line
    is the one to print)."""
    resume = " Continue from the last checkpoint with --resume auto."
    together = _stopped_together(failures)
    if together is not None:
        # a rank that exits first after a stop is no failure: the agent then stops the ranks
        # still finishing, and naming it "failed first" would be false
        return together, None
    first = _first_failure(failures)
    if first is None:
        rank = min(failures)
        return 1, (
            f"ampkit: error: --nproc: rank {rank} and the other workers of this node lost "
            "their connection to the rest of the job (a process on another node failed, or "
            f"the network did); see that node's output.{resume}"
        )
    rank, failure = first
    code = int(getattr(failure, "exitcode", 1))
    pid = getattr(failure, "pid", "?")
    if code < 0:
        name = signal.Signals(-code).name
        return 128 - code, (
            f"ampkit: error: --nproc: rank {rank} (PID {pid}) failed first: it was killed by "
            f"{name}; the other workers were stopped.{resume}"
        )
    main = failures.get(0)
    main_code = int(getattr(main, "exitcode", PEER_LOST)) if main is not None else PEER_LOST
    if main_code != PEER_LOST and main_code >= 0:
        return code or 1, None  # rank 0 met the error and printed it
    message = str(getattr(failure, "message", "") or "")
    said = f": {message}" if message and not message.startswith("To enable traceback") else ""
    return code or 1, (
        f"ampkit: error: --nproc: rank {rank} (PID {pid}) failed first with exit status "
        f"{code}{said}; the other workers were stopped."
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

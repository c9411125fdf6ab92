"""Multi-node launch (issue 21): ``ampkit train --nnodes M --node-rank R --master-addr HOST
--master-port P`` (or ``--rdzv-endpoint``) as torchrun's options, the same from SLURM's
environment, the first failed rank from torchrun's failure records, and two nodes of one
process on 127.0.0.1 bitwise equal to ``--nproc 2``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from ampkit.cli import main
from ampkit.cli.torchrun import PEER_LOST, LaunchSpec, _exit_status, expand_nodelist, slurm_launch

TINY = [
    *("--steps", "4", "--n-layer", "1", "--n-embd", "32", "--n-head", "2"),
    *("--seq-len", "16", "--batch-size", "2", "--log-every", "1", "--precision", "fp32"),
    "--no-progress",
]


def test_slurm_node_lists_expand_as_slurm_writes_them():
    assert expand_nodelist("node[01-03,07],gpu5") == [
        "node01",
        "node02",
        "node03",
        "node07",
        "gpu5",
    ]
    assert expand_nodelist("a,b") == ["a", "b"]
    assert expand_nodelist("n[9-11]-ib") == ["n9-ib", "n10-ib", "n11-ib"]
    for bad in ("node[01-03", "n[a-b]", "a,,b", "n[3-1]", "a]"):
        with pytest.raises(ValueError, match="malformed SLURM node list"):
            expand_nodelist(bad)


def test_slurm_environment_gives_the_static_rendezvous():
    env = {
        "SLURM_JOB_ID": "123456",
        "SLURM_NNODES": "4",
        "SLURM_NTASKS": "4",
        "SLURM_NODEID": "2",
        "SLURM_PROCID": "2",
        "SLURM_JOB_NODELIST": "node[01-03,07]",
    }
    spec = slurm_launch(env, nproc=8)
    assert spec == LaunchSpec(
        nproc=8, nnodes=4, node_rank=2, master_addr="node01", master_port=20000 + 123456 % 10000
    )
    assert spec.world_size == 32
    assert spec.torchrun_args() == [
        "--nproc_per_node=8",
        "--nnodes=4",
        "--node_rank=2",
        "--master_addr=node01",
        f"--master_port={20000 + 3456}",
    ]
    assert slurm_launch({**env, "SLURM_NNODES": "1", "SLURM_NTASKS": "1"}, 2) is None
    assert slurm_launch({}, 2) is None
    with pytest.raises(ValueError, match="one task per node"):
        slurm_launch({**env, "SLURM_NTASKS": "32"}, 8)


def test_launch_specs_are_torchruns_own_options():
    assert LaunchSpec(nproc=2).torchrun_args() == ["--standalone", "--nproc_per_node=2"]
    c10d = LaunchSpec(nproc=1, nnodes=2, rdzv_endpoint="h:29400", rdzv_id="job7")
    assert c10d.torchrun_args() == [
        "--nproc_per_node=1",
        "--nnodes=2",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=h:29400",
        "--rdzv_id=job7",
    ]


@pytest.mark.parametrize(
    ("flags", "hint", "said"),
    [
        (["--nnodes", "2"], "--master-addr", "needs --master-addr HOST"),
        (["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"], "--node-rank", "0 to 1"),
        (["--nnodes", "0"], "--nnodes", "use 1 or more"),
        (["--nnodes", "2", "--rdzv-endpoint", "nohost"], "--rdzv-endpoint", "HOST:PORT"),
        (["--dist-timeout", "0"], "--dist-timeout", "a positive number of seconds"),
    ],
)
def test_launch_options_are_checked_before_any_work(tmp_path, flags, hint, said):
    result = CliRunner().invoke(main, ["train", *TINY, "--out", str(tmp_path / "r"), *flags])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and hint in lines[0] and said in lines[0], result.stderr
    assert not (tmp_path / "r").exists()


def test_slurm_with_several_tasks_per_node_is_one_line(tmp_path, monkeypatch):
    for name, value in {
        "SLURM_JOB_ID": "9",
        "SLURM_NNODES": "2",
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["train", *TINY, "--nproc", "2"])
    assert result.exit_code == 2
    assert "srun --ntasks-per-node=1" in result.stderr and len(result.stderr.splitlines()) == 1
    # --nnodes given on the command line wins over the environment: one process trains
    alone = CliRunner().invoke(main, ["train", *TINY, "--nnodes", "1", "--steps", "1"])
    assert alone.exit_code == 0, alone.stderr


def failure(tmp_path: Path, rank: int, exitcode: int, at: int, message: str = "") -> ProcessFailure:
    """torchrun's record of a failed worker, read from an error file as torchrun reads it."""
    error_file = tmp_path / f"error-{rank}.json"
    error_file.write_text(json.dumps({"message": message or f"rank {rank}", "timestamp": at}))
    return ProcessFailure(
        local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file=str(error_file)
    )


def test_the_rank_that_failed_first_is_named_never_one_that_lost_its_peer(tmp_path):
    killed = {
        0: failure(tmp_path, 0, PEER_LOST, 100),
        1: failure(tmp_path, 1, -signal.SIGKILL, 100),
    }
    status, line = _exit_status(killed)
    assert status == 128 + signal.SIGKILL
    assert line is not None and "rank 1 (PID 1001) failed first: it was killed by SIGKILL" in line
    # the earliest record wins; the agent's SIGTERM to the others is never blamed on a tie
    later = {
        0: failure(tmp_path, 0, -signal.SIGTERM, 100),
        1: failure(tmp_path, 1, 3, 100, "disk gone"),
        2: failure(tmp_path, 2, -signal.SIGKILL, 101),
    }
    status, line = _exit_status(later)
    assert status == 3 and line is not None
    assert "rank 1 (PID 1001) failed first with exit status 3: disk gone" in line
    # rank 0 printed its own error line: nothing more to say
    assert _exit_status({0: failure(tmp_path, 0, 2, 100), 1: failure(tmp_path, 1, 2, 100)}) == (
        2,
        None,
    )
    status, line = _exit_status({0: failure(tmp_path, 0, PEER_LOST, 100)})
    assert status == 1 and line is not None and "lost their connection" in line


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_two_nodes_of_one_process_equal_nproc_2_bitwise(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ampkit = [sys.executable, "-m", "ampkit", "train", *TINY]
    port = str(free_port())
    nodes = [
        subprocess.Popen(
            [
                *ampkit,
                *("--nnodes", "2", "--node-rank", str(rank)),
                *("--master-addr", "127.0.0.1", "--master-port", port),
                *("--out", str(tmp_path / "nodes")),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=300) for node in nodes]  # a hang fails here
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert "processes  2" in outputs[0][0]  # rank 0's summary: a job of two processes
    one = subprocess.run(
        [*ampkit, "--nproc", "2", "--out", str(tmp_path / "one")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr
    a = load_file(tmp_path / "nodes" / "model.safetensors")
    b = load_file(tmp_path / "one" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

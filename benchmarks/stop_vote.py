"""What the per-step stop vote of ``handle_signals`` costs (:mod:`ampkit.trainer.preemption`).

Run under torchrun (2 processes on one machine: gloo over loopback on a CPU, NCCL on GPUs).
Three loops of ``--steps`` iterations are timed on rank 0, each between barriers, in the order
given, ``--rounds`` times:

* ``step``: a stand-in for the step's compute (``--matmuls`` products of 256 x 256 matrices);
* ``step + vote``: the same plus :meth:`StopVote.cast` (an asynchronous all-reduce of one int,
  the previous step's waited for);
* ``step + blocking``: the same plus a blocking all-reduce of one int (what a vote that waits
  would cost).

    torchrun --standalone --nproc_per_node=2 benchmarks/stop_vote.py
    torchrun --standalone --nproc_per_node=2 benchmarks/stop_vote.py --matmuls 0 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from ampkit.trainer.distributed import init_distributed, teardown_distributed
from ampkit.trainer.preemption import StopVote


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--matmuls", type=int, default=4)
    args = parser.parse_args()
    device = (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    )
    ctx = init_distributed("cuda" if device is not None else "cpu")
    device = device or torch.device("cpu")
    vote = StopVote(ctx, device)
    x = torch.randn(256, 256, device=device)
    flag = torch.zeros(1, dtype=torch.int32, device=device)

    def step() -> None:
        for _ in range(args.matmuls):
            x @ x

    def voted() -> None:
        step()
        vote.cast(None)

    def blocking() -> None:
        step()
        dist.all_reduce(flag)
        flag.item()

    loops: dict[str, Callable[[], None]] = {
        "step": step,
        "step + vote": voted,
        "step + blocking": blocking,
    }
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.rounds):
        for name, loop in loops.items():
            for _ in range(20):
                loop()
            vote.drain()
            dist.barrier()
            started = time.perf_counter()
            for _ in range(args.steps):
                loop()
            vote.drain()
            if device.type == "cuda":
                torch.cuda.synchronize()
            dist.barrier()
            times[name].append((time.perf_counter() - started) / args.steps * 1e6)
    if ctx.is_main:
        for name, values in times.items():
            shown = ", ".join(f"{v:.0f}" for v in values)
            print(f"{name:>16}: median {statistics.median(values):.0f} us/step ({shown})")
    teardown_distributed(ctx, wait_for_all=True)


if __name__ == "__main__":
    main()

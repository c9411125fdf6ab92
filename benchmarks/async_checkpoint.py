"""What a checkpoint costs the training steps: none, synchronous and asynchronous saves.

A :class:`ampkit.Trainer` fits an MLP of ``--size`` million parameters (a stack of 1024-wide
Linear layers, AdamW, random data held in memory) for ``--steps`` optimizer steps in three
variants, run interleaved in a shuffled order per round, each into a fresh folder:

* ``none``: no checkpoints;
* ``sync``: a sharded checkpoint every ``--every`` steps, written before the next step starts;
* ``async``: the same checkpoints with ``async_save=True``: the state is copied to host memory,
  written by a background thread while training goes on, and committed at the next checkpoint.

A callback stamps the end of every optimizer step (wall time and this thread's CPU time), so a
step's time includes whatever the Trainer did after the previous step (a synchronous save, the
start of an asynchronous one). Reported per round, as ratios to ``none`` at the same step
indices: the step that starts a save (``save``), the steps *during* a background save (the
``--window`` steps after it) and the whole run (total time / steps). The target for ``async`` is a step at most 1.1x a
step without checkpoints. On a machine with few cores the background writer (hashing and
fsync included) competes with training for the CPU; the thread CPU time of the training thread
shows what the save costs the step itself, wall time what it costs on this machine.

    python benchmarks/async_checkpoint.py                     # 10M parameters, 3 rounds
    python benchmarks/async_checkpoint.py --size 50 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ampkit import CheckpointConfig, LoggingConfig, Trainer
from ampkit.callbacks import Callback

WIDTH = 1024
VARIANTS = ("none", "sync", "async")


class StepClock(Callback):
    """Stamps wall time and this thread's CPU time at the end of every optimizer step."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def on_fit_start(self, trainer: Any) -> None:
        self.wall, self.cpu = [time.perf_counter()], [time.thread_time()]

    def on_step_end(self, trainer: Any, result: Any) -> None:
        if result.stepped:
            self.wall.append(time.perf_counter())
            self.cpu.append(time.thread_time())

    def durations(self, clock: str) -> list[float]:
        stamps = self.wall if clock == "wall" else self.cpu
        return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def run(variant: str, args: argparse.Namespace, folder: Path) -> StepClock:
    torch.manual_seed(0)
    layers = max(1, round(args.size * 1e6 / (WIDTH * WIDTH + WIDTH)))
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)))
    data = [(torch.randn(args.batch, WIDTH), torch.randn(args.batch, WIDTH)) for _ in range(8)]
    checkpoint = None
    if variant != "none":
        checkpoint = CheckpointConfig(
            folder / "ckpt", every=args.every, layout="sharded", async_save=variant == "async"
        )
    clock = StepClock()
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-4),
        max_steps=args.steps,
        loss_fn=torch.nn.functional.mse_loss,
        precision="fp32",
        device="cpu",
        checkpoint=checkpoint,
        logging=LoggingConfig(progress_bar=False),
        callbacks=[clock],
    )
    with trainer:
        trainer.fit(data * (args.steps // len(data) + 1))
    return clock


def step_indices(args: argparse.Namespace) -> dict[str, list[int]]:
    """Which step durations hold a save's start (``save``: the step after a checkpoint step,
    whose time includes the Trainer's work on the save) and which run while an asynchronous
    save may still be writing (``during``: the ``--window`` steps after that one)."""
    picked: dict[str, list[int]] = {"save": [], "during": []}
    for saved in range(args.every, args.steps - 1, args.every):  # it saves after this step
        picked["save"].append(saved)
        picked["during"] += [i for i in range(saved + 1, saved + 1 + args.window) if i < args.steps]
    return picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=float, default=10.0, help="parameters, millions")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--window", type=int, default=3, help="steps counted as during a save")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ampkit-async-ckpt-"))
    ratios: dict[str, dict[str, dict[str, list[float]]]] = {
        v: {c: {"save": [], "during": [], "run": []} for c in ("wall", "cpu")} for v in VARIANTS[1:]
    }
    picked = step_indices(args)
    try:
        for round_ in range(args.rounds):
            order = list(VARIANTS)
            random.Random(round_).shuffle(order)
            clocks = {}
            for variant in order:
                folder = root / f"{round_}-{variant}"
                clocks[variant] = run(variant, args, folder)
                shutil.rmtree(folder, ignore_errors=True)
            for clock in ("wall", "cpu"):
                base = clocks["none"].durations(clock)
                for variant in VARIANTS[1:]:
                    steps = clocks[variant].durations(clock)
                    for what, indices in picked.items():
                        ratios[variant][clock][what].append(
                            statistics.median(steps[i] for i in indices)
                            / statistics.median(base[i] for i in indices)
                        )
                    ratios[variant][clock]["run"].append(sum(steps) / sum(base))
            print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    flags = set()
    if Path("/proc/cpuinfo").exists():
        text = Path("/proc/cpuinfo").read_text()
        flags = {f for f in ("avx512_bf16", "amx_bf16", "avx512f") if f" {f}" in text}
    report = {
        "size_millions": args.size,
        "steps": args.steps,
        "every": args.every,
        "window": args.window,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "cpu_flags": sorted(flags),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "ratios": ratios,
    }
    print(
        f"{args.size:g}M parameters, checkpoint every {args.every} of {args.steps} steps, "
        f"{args.rounds} rounds; ratios to no checkpoints (median [min-max] over rounds)"
    )
    for variant in VARIANTS[1:]:
        for clock in ("wall", "cpu"):
            cells = []
            for what in ("save", "during", "run"):
                values = ratios[variant][clock][what]
                cells.append(
                    f"{what} {statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"
                )
            print(f"  {variant:5s} {clock:4s}: " + ", ".join(cells))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

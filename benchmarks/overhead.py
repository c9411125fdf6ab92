"""MixedPrecision vs the hand-written torch.autocast loop, and low precision vs fp32.

Variants are run interleaved, one step each per round, in a rotated order, so a machine that
slows down under sustained load (these 2-core CPUs slow 3-10x after about a minute) affects
every variant of a round alike. A fixed matmul probe is timed between rounds; rounds next to
a probe that moved more than ``--probe-tolerance`` from its median are dropped. Reported:
medians of per-round ratios, never one absolute time. The timing machinery is
``ampkit.bench.timing`` (shared with ``ampkit bench`` and ``benchmarks/peers.py``).

    python benchmarks/overhead.py                      # GPT, fp32 and bf16, 40 rounds
    python benchmarks/overhead.py --precisions fp32,bf16,fp16 --rounds 20 --json out.json
    python benchmarks/overhead.py --model mlp --width 1024   # the 1024-wide MLP of the policy note
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

import ampkit
from ampkit.bench.timing import matmul_probe, run_interleaved
from ampkit.models.corpus import load_corpus
from ampkit.models.gpt import GPT, GPTConfig
from ampkit.precision.hardware import probe

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Workload:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def gpt_workload(batch_size: int, seq_len: int) -> Workload:
    corpus = load_corpus(max_bytes=500_000)
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=seq_len))
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        batch=lambda step: corpus.batch(step, batch_size, seq_len),
        loss=lambda m, x, y: m(x, y)[1],
    )


def mlp_workload(batch_size: int, width: int) -> Workload:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, 10),
    )
    data = torch.randn(batch_size, width)
    labels = torch.randint(0, 10, (batch_size,))
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        batch=lambda step: (data, labels),
        loss=lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y),
    )


def hand_written_step(precision: str, max_norm: float) -> Callable[[Workload, int], None]:
    """The loop from PyTorch's AMP recipe, with unscale_ before clipping."""
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "fp16")
    enabled = precision != "fp32"

    def step(w: Workload, i: int) -> None:
        x, y = w.batch(i)
        with torch.autocast("cpu", dtype=_DTYPES[precision], enabled=enabled):
            loss = w.loss(w.model, x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(w.optimizer)
        torch.nn.utils.clip_grad_norm_(w.model.parameters(), max_norm)
        scaler.step(w.optimizer)
        scaler.update()
        w.optimizer.zero_grad(set_to_none=True)

    return step


def ampkit_step(precision: str, max_norm: float) -> Callable[[Workload, int], None]:
    mp = ampkit.MixedPrecision(precision, "cpu", max_grad_norm=max_norm)

    def step(w: Workload, i: int) -> None:
        x, y = w.batch(i)
        with mp.autocast():
            loss = w.loss(w.model, x, y)
        mp.backward(loss)
        mp.step(w.optimizer)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--model", choices=["gpt", "mlp"], default="gpt")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--probe-tolerance", type=float, default=0.25)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument(
        "--timer",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: torch on one thread, timed by that thread's CPU time (time.thread_time), so "
        "other processes on a shared machine do not inflate it",
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore", ampkit.PrecisionWarning)
    clock = time.perf_counter
    if args.timer == "cpu":
        torch.set_num_threads(1)
        clock = time.thread_time

    def workload() -> Workload:
        if args.model == "gpt":
            return gpt_workload(args.batch_size, args.seq_len)
        return mlp_workload(args.batch_size, args.width)

    variants: dict[str, tuple[Workload, Callable[[Workload, int], None]]] = {}
    for precision in args.precisions.split(","):
        variants[f"hand-written {precision}"] = (workload(), hand_written_step(precision, 1.0))
        variants[f"ampkit {precision}"] = (workload(), ampkit_step(precision, 1.0))

    def make_step(w: Workload, step: Callable[[Workload, int], None]) -> Callable[[int], None]:
        return lambda i: step(w, i)

    timings = run_interleaved(
        {name: make_step(w, step) for name, (w, step) in variants.items()},
        rounds=args.rounds,
        warmup=args.warmup,
        clock=clock,
        probe=matmul_probe(),
        tolerance=args.probe_tolerance,
    )
    names = timings.names
    keep = timings.kept
    ratio = timings.ratio

    results = {
        "machine": probe(torch.device("cpu")).name,
        "threads": torch.get_num_threads(),
        "timer": args.timer,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "model": args.model,
        "rounds_kept": len(keep),
        "rounds": args.rounds,
        "median_step_ms": {n: 1000 * timings.median(n) for n in names},
        "ampkit_over_hand_written": {},
        "over_fp32": {},
    }
    precisions = args.precisions.split(",")
    for precision in precisions:
        results["ampkit_over_hand_written"][precision] = ratio(
            f"ampkit {precision}", f"hand-written {precision}"
        )
        if precision != "fp32" and "fp32" in precisions:
            results["over_fp32"][precision] = ratio(f"ampkit {precision}", "ampkit fp32")
    print(
        f"machine: {results['machine']}, {results['threads']} threads, torch {results['torch']}, "
        f"timer {args.timer}"
    )
    print(f"model: {args.model}; rounds kept {len(keep)}/{args.rounds}")
    print("| variant | median step (ms) |")
    print("|---|---|")
    for n in names:
        print(f"| {n} | {results['median_step_ms'][n]:.1f} |")
    print("\n| precision | ampkit / hand-written (median of paired ratios) | step time vs fp32 |")
    print("|---|---|---|")
    for precision in precisions:
        vs = results["over_fp32"].get(precision)
        print(
            f"| {precision} | {results['ampkit_over_hand_written'][precision]:.3f} | "
            f"{'1.000' if precision == 'fp32' else (f'{vs:.2f}x' if vs else '-')} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

"""What watching for inf/NaN costs per training step: ampkit.detect_nonfinite vs
torch.autograd.detect_anomaly, against the same step unwatched.

Variants run interleaved, ``--repeat`` steps each per round in a shuffled order, so a machine
that slows down under sustained load affects every variant of a round alike; a variant's time in
a round is its fastest step there. By default torch runs on one thread and the timer is that
thread's CPU time (``time.thread_time``), which other processes on a shared machine do not
inflate; ``--timer wall --threads N`` measures wall time instead. A fixed matmul probe is timed
before each round; rounds where it moved more than ``--probe-tolerance`` from its median are
dropped. Reported: per-round ratios to the unwatched step of the same round (median and
quartiles), never one absolute time.

    python benchmarks/nonfinite_overhead.py                     # built-in GPT, 30 rounds
    python benchmarks/nonfinite_overhead.py --rounds 10 --json out.json
    python benchmarks/nonfinite_overhead.py --n-layer 4 --n-embd 128 --batch-size 16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import random
import statistics
import time
import warnings
from collections.abc import Callable, Iterator

import torch

import ampkit
from ampkit.models.corpus import load_corpus
from ampkit.models.gpt import GPT, GPTConfig
from ampkit.precision.hardware import probe


def make_step(args: argparse.Namespace) -> tuple[torch.nn.Module, Callable[[int], None]]:
    corpus = load_corpus(max_bytes=300_000)
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=args.seq_len, n_layer=args.n_layer, n_embd=args.n_embd))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(i: int) -> None:
        x, y = corpus.batch(i, args.batch_size, args.seq_len)
        _, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, step


def probe_time(clock: Callable[[], float], size: int = 512) -> float:
    a = torch.randn(size, size)
    start = clock()
    for _ in range(4):
        a @ a
    return clock() - start


def variants(model: torch.nn.Module) -> dict[str, Callable[[], contextlib.AbstractContextManager]]:
    @contextlib.contextmanager
    def probe_ctx(strict: bool) -> Iterator[None]:
        with ampkit.detect_nonfinite(model, strict=strict) as p:
            yield
            p.on_step()  # the per-step check a Trainer callback makes
            if p.first is not None:
                raise RuntimeError(f"unexpected inf/NaN: {p.first}")

    return {
        "plain": contextlib.nullcontext,
        "detect_nonfinite": lambda: probe_ctx(False),
        "detect_nonfinite(strict)": lambda: probe_ctx(True),
        "detect_anomaly": lambda: torch.autograd.detect_anomaly(check_nan=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2, help="steps per variant per round")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--timer", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--probe-tolerance", type=float, default=0.25)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.timer == "cpu" else time.perf_counter

    model, step = make_step(args)
    ctxs = variants(model)
    names = list(ctxs)
    times: dict[str, list[float]] = {n: [] for n in names}
    probes: list[float] = []
    rng = random.Random(0)
    i = 0
    for r in range(args.warmup + args.rounds):
        if r >= args.warmup:
            probes.append(probe_time(clock))
        order = names[:]
        rng.shuffle(order)
        for name in order:
            fastest = float("inf")
            for _ in range(args.repeat):
                with ctxs[name]():
                    start = clock()
                    step(i)
                    fastest = min(fastest, clock() - start)
                i += 1
            if r >= args.warmup:
                times[name].append(fastest)

    median_probe = statistics.median(probes)
    keep = [k for k, p in enumerate(probes) if abs(p / median_probe - 1) <= args.probe_tolerance]

    def summary(name: str) -> dict[str, float]:
        ratios = sorted(times[name][k] / times["plain"][k] for k in keep)
        q = statistics.quantiles(ratios, n=4)
        return {"median": statistics.median(ratios), "q1": q[0], "q3": q[2]}

    result = {
        "machine": probe(torch.device("cpu")).name,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "timer": args.timer,
        "config": vars(args),
        "rounds_kept": len(keep),
        "plain_step_ms_median": 1000 * statistics.median(times["plain"][k] for k in keep),
        "ratios": {n: summary(n) for n in names if n != "plain"},
    }
    print(
        f"{result['machine']}, torch {result['torch']}, {result['threads']} thread(s), "
        f"{args.timer} time; GPT "
        f"n_layer={args.n_layer} n_embd={args.n_embd}, batch {args.batch_size}x{args.seq_len}, "
        f"{len(keep)} of {args.rounds} rounds kept; unwatched step "
        f"{result['plain_step_ms_median']:.1f} ms (median)"
    )
    print("| variant | step time / unwatched (median) | quartiles |")
    print("|---|---|---|")
    for name, s in result["ratios"].items():
        print(f"| {name} | {s['median']:.2f}x | {s['q1']:.2f}-{s['q3']:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

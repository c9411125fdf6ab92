"""Size and time of ``ampkit report`` against the number of logged steps.

    python benchmarks/report_size.py --steps 10000 100000

For each count, writes two run folders of that many rows in the Trainer's ``metrics.jsonl``
format (every key a logged step has: loss, lr, scale, skipped, grad_norm, step time and
throughput; a decaying loss with noise, a skipped step every 997 steps, one spike), runs
``ampkit report A B --out report.html`` in a child process, and prints the page's size, the
child's wall and CPU time and its peak resident set size (``os.wait4``). CPU time is the figure
to compare on a shared machine: wall time there depends on the other jobs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_rows(folder: Path, steps: int, seed: int) -> None:
    folder.mkdir(parents=True)
    rng = random.Random(seed)
    with open(folder / "metrics.jsonl", "w", encoding="utf-8") as file:
        for step in range(1, steps + 1):
            loss = 2 + 3 * math.exp(-step / (steps / 10)) + rng.gauss(0, 0.05)
            if step == steps // 3:
                loss = 40.0  # one spike: it must survive the downsampling
            row = {
                "step": step,
                "loss": loss,
                "lr": 1e-3,
                "scale": 65536.0,
                "skipped": step % 997 == 0,
                "grad_norm": abs(rng.gauss(1, 0.1)),
                "step_time_ms": 10 + rng.random(),
                "samples_per_s": 100.0,
                "tokens_per_s": 12800 + rng.random(),
            }
            file.write(json.dumps(row, separators=(",", ":")) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args()
    print("| logged steps (x2 runs) | metrics.jsonl | page | wall | CPU | peak RSS |")
    print("|---|---|---|---|---|---|")
    for steps in args.steps:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            write_rows(root / "a", steps, 0)
            write_rows(root / "b", steps, 1)
            page = root / "report.html"
            command = [sys.executable, "-m", "ampkit", "report", str(root / "a"), str(root / "b")]
            start = time.perf_counter()
            child = subprocess.Popen(
                [*command, "--out", str(page), "--no-progress"], stdout=subprocess.DEVNULL
            )
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - start
            if status:
                raise SystemExit(f"ampkit report failed ({status})")
            rows_mb = (root / "a" / "metrics.jsonl").stat().st_size / 2**20
            print(
                f"| {steps:,} | {rows_mb:.1f} MiB | {page.stat().st_size / 1024:.0f} KiB | "
                f"{wall:.1f} s | {usage.ru_utime + usage.ru_stime:.1f} s | "
                f"{usage.ru_maxrss / 1024:.0f} MiB |"
            )


if __name__ == "__main__":
    main()

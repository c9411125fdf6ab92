"""Peak memory of ``ampkit train --data FILE`` against the size of FILE.

    python benchmarks/data_memory.py --mb 256

Writes a deterministic ASCII text file of ``--mb`` MiB (the standard library's ``os.py``,
repeated), then runs ``ampkit train --data FILE --steps 2`` (the default GPT, batch 8 x 64
tokens) in a child process, once with a 1 MiB file (the fixed cost: Python, torch, the model)
and once with the big file, and prints each child's peak resident set size (``os.wait4``'s ``ru_maxrss``).
Run it with ``PYTHONPATH`` pointing at the ampkit sources to measure (the flags it passes
exist in every version, so two checkouts can be compared).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TRAIN = [
    "train",
    "--steps",
    "2",
    "--seq-len",
    "64",
    "--batch-size",
    "8",
    "--precision",
    "fp32",
    "--device",
    "cpu",
    "--no-progress",
]


def write_text(path: Path, mib: int) -> None:
    """``mib`` MiB of ASCII text made of the standard library's ``os.py``, repeated."""
    import os as os_module

    block = Path(os_module.__file__).read_bytes().decode("utf-8").encode("ascii", "replace")
    target = mib << 20
    with open(path, "wb") as f:
        written = 0
        while written < target:
            chunk = block[: target - written]
            f.write(chunk)
            written += len(chunk)


def peak_rss_mib(data: Path) -> float:
    """Peak RSS of one ``ampkit train --data data`` child, in MiB."""
    child = subprocess.Popen(
        [sys.executable, "-m", "ampkit", *TRAIN, "--data", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"ampkit train failed: {child.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="size of the big file in MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        small, big = Path(folder) / "small.txt", Path(folder) / "big.txt"
        write_text(small, 1)
        write_text(big, args.mb)
        base = peak_rss_mib(small)
        peak = peak_rss_mib(big)
    print(f"file        {args.mb} MiB")
    print(f"1 MiB file  peak RSS {base:,.0f} MiB")
    print(f"big file    peak RSS {peak:,.0f} MiB")
    print(f"extra       {peak - base:,.0f} MiB = {(peak - base) / args.mb:.2f}x the file")


if __name__ == "__main__":
    main()

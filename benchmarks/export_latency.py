"""Size and ONNX Runtime (CPU) latency of exported ONNX files, timed interleaved.

    python benchmarks/export_latency.py runs/gpt-fp32.onnx runs/gpt-fp16.onnx --rounds 30

Each round runs every file once on the same held-out batch (the built-in GPT's input), in
turn, so load on a shared machine hits all files alike; the table gives the median per file
and its ratio to the first file.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import onnxruntime as ort


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: no constant-folding notes in the table
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    sessions = [
        ort.InferenceSession(f, options, providers=["CPUExecutionProvider"]) for f in args.files
    ]
    feeds = []
    for s in sessions:
        spec = s.get_inputs()[0]
        shape = [d if isinstance(d, int) else 1 for d in spec.shape]
        feeds.append({spec.name: np.random.default_rng(0).integers(0, 256, shape)})
    times: list[list[float]] = [[] for _ in sessions]
    for s, feed in zip(sessions, feeds, strict=True):  # warm-up
        s.run(None, feed)
    for _ in range(args.rounds):
        for i, (s, feed) in enumerate(zip(sessions, feeds, strict=True)):
            start = time.perf_counter()
            s.run(None, feed)
            times[i].append(time.perf_counter() - start)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; onnxruntime "
          f"{ort.__version__}, {args.threads} thread(s), {args.rounds} interleaved rounds")  # fmt: skip
    base = statistics.median(times[0])
    print("| file | size (KiB) | median latency (ms) | vs first |")
    print("| --- | ---: | ---: | ---: |")
    for f, t in zip(args.files, times, strict=True):
        median = statistics.median(t)
        size = os.path.getsize(f) / 1024
        print(
            f"| {os.path.basename(f)} | {size:,.0f} | {median * 1e3:.2f} | {median / base:.2f}x |"
        )


if __name__ == "__main__":
    main()

"""The prepared GPU benchmark: fp32 / fp16 / bf16 and torch.compile on a ~125M-parameter GPT,
and bf16 vs fp8 (compiled) on a wider GPT where fp8 can pay off.

One script, sized to finish in under 8 minutes on an H100/H200:

1. eager, interleaved: fp32 (ampkit's fp32 policy: TF32 on for matmuls), fp16 (loss scaling),
   bf16, bf16-true (bf16 weights, compensated updates, fp32 optimizer state); 20 timed steps
   each after 5 warm-up steps;
2. ``torch.compile``: fp32 and bf16, eager and compiled, interleaved the same way (compilation
   happens in the warm-up steps, not in the timed ones). Skip with ``--no-compile``.
3. fp8 (compute capability 8.9+ with torchao): fp32, bf16 and fp8 (tensorwise), eager and
   compiled, on a GPT of width 2048 (4 layers, 16 heads, sequence 2048, batch 4: 8,192 tokens
   per step, Linear shapes up to 8192 x 2048 x 8192). fp8 converts the layers its measured
   plan selects (each Linear timed in bf16 and fp8 at the real shape); the plan's summary is
   among the report's notes.
   Skip with ``--no-fp8``.

Model: the built-in GPT, 18 layers, width 768, 12 heads, byte vocabulary (128.8M parameters),
sequence 1024, batch 16 (16,384 tokens per step), AdamW. Per variant: median step time,
tokens/s, speed-up over fp32 (median of paired per-round ratios), peak CUDA memory of a step
as if the variant were alone on the device, loss after the run and its gap to fp32, and MFU
against the device's dense peak (``ampkit.bench.flops.PEAK_FLOPS``).

Targets (issue 6): bf16 >= 2x faster than fp32, peak memory <= 0.6x of fp32, MFU >= 40%.

    python benchmarks/gpu_bench.py                     # both parts; tables on stdout
    OUT=/some/dir python benchmarks/gpu_bench.py       # also gpu_bench.md / gpu_bench_*.json there
    python benchmarks/gpu_bench.py --no-compile --steps 10

Each part's table is written to $OUT as soon as the part ends, so a run cut short still
leaves what it measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from ampkit.bench import BenchReport, run_bench
from ampkit.bench.workloads import gpt_workload


def _table(report: BenchReport, title: str) -> str:
    lines = [
        f"### {title}",
        "",
        f"{report.description}; {report.device_name}, torch "
        f"{report.torch_version}; {report.rounds_kept}/{report.steps} rounds kept",
        "",
        "| variant | step (ms) | tokens/s | vs fp32 | peak memory (GiB) | vs fp32 memory | "
        "loss | gap to fp32 | MFU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in report.variants:
        memory = "-" if v.memory_bytes is None else f"{v.memory_bytes / 2**30:.2f}"
        mem_ratio = "-" if v.memory_vs_fp32 is None else f"{v.memory_vs_fp32:.2f}"
        mfu = "-" if v.mfu is None else f"{v.mfu:.1%}"
        lines.append(
            f"| {v.name} | {1000 * v.median_step_s:.1f} | {v.throughput:,.0f} | "
            f"{v.speedup_vs_fp32:.2f}x | {memory} | {mem_ratio} | {v.final_loss:.4f} | "
            f"{v.loss_gap_vs_fp32:+.4f} | {mfu} |"
        )
    lines += ["", report.verdict.text, "", *(f"note: {n}" for n in report.notes), ""]
    return "\n".join(lines)


def _fp8_unavailable(device: str) -> str | None:
    """Why fp8 cannot run on ``device``, or None when it can."""
    from ampkit.errors import AmpkitError
    from ampkit.precision.policy import resolve_precision

    try:
        resolve_precision("fp8", device)
    except AmpkitError as exc:
        return str(exc)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=18)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--no-fp8", action="store_true")
    parser.add_argument("--fp8-width", type=int, default=2048)
    parser.add_argument("--fp8-layers", type=int, default=4)
    parser.add_argument("--fp8-seq-len", type=int, default=2048)
    parser.add_argument("--fp8-batch-size", type=int, default=4)
    parser.add_argument("--device", default="cuda", help="cpu only to smoke-test the script")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_bench: no CUDA device; this script measures GPUs only.", file=sys.stderr)
        return 2
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    if out:
        out.mkdir(parents=True, exist_ok=True)

    def workload():
        return gpt_workload(
            args.batch_size, args.seq_len, n_layer=args.layers, n_head=args.heads, n_embd=args.width
        )

    common = dict(device=args.device, steps=args.steps, warmup=args.warmup, burst_s=None)
    parts = [
        (
            "eager: fp32 vs fp16 vs bf16 vs bf16-true",
            "eager",
            dict(precisions=["fp32", "fp16", "bf16", "bf16-true"]),
        )
    ]
    if not args.no_compile:
        parts.append(
            (
                "torch.compile: fp32 and bf16",
                "compile",
                dict(precisions=["fp32", "bf16"], compile=True),
            )
        )

    def fp8_workload():
        return gpt_workload(
            args.fp8_batch_size,
            args.fp8_seq_len,
            n_layer=args.fp8_layers,
            n_head=args.fp8_width // 128,
            n_embd=args.fp8_width,
        )

    if not args.no_fp8:
        reason = _fp8_unavailable(args.device)
        if reason:
            print(f"gpu_bench: fp8 part skipped: {reason}", file=sys.stderr)
        else:
            parts.append(
                (
                    "fp8: fp32, bf16 and fp8 (tensorwise), eager and compiled",
                    "fp8",
                    dict(precisions=["bf16", "fp8"], compile=True, workload=fp8_workload),
                )
            )
    text = []
    for title, key, options in parts:
        start = time.perf_counter()
        make = options.pop("workload", workload)
        report = run_bench(make(), **options, **common)
        table = _table(report, f"{title} ({time.perf_counter() - start:.0f} s)")
        print(table, flush=True)
        text.append(table)
        if out:
            report.write_json(out / f"gpu_bench_{key}.json")
            (out / "gpu_bench.md").write_text("\n".join(text))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a Trainer checkpoint costs against ``torch.save`` + fsync of the same state.

The state is that of a model of ``--sizes`` parameters (millions; a stack of 1024-wide Linear
layers) after one AdamW step: the weights plus the optimizer's state dict (two fp32 moments per
parameter), i.e. what the Trainer's full-layout writer gets from its snapshot. Two variants run
interleaved, in a shuffled order per round, each writing into a fresh folder:

* ``ampkit``: :func:`ampkit.checkpoint.folder.write_checkpoint` (what the Trainer calls): the
  finite check, fp32 safetensors weights and ``state.pt`` streamed into a temporary folder and
  hashed while written, the manifest and ``COMPLETE``, fsyncs and the atomic rename;
* ``torch.save``: ``torch.save({"model": ..., "optimizer": ...}, file)``, flush, fsync of the
  file and of its folder.

Reported per size: per-round ratios ampkit / torch.save (median and quartiles) by wall time
and by this process's CPU time (``time.process_time``: every thread's, as ampkit hashes on a
helper thread; other processes on a shared machine do not inflate it; fsync waits count in
wall time only), and the peak extra resident memory of one
save of each variant (``VmHWM`` after resetting it, minus the resident size before), as a
multiple of the state's size. Also the time to verify one written checkpoint (what every load
and resume does: every file re-hashed with BLAKE3 on all cores), beside hashing the same files
with SHA-256, which manifests held before format 3, interleaved over the same rounds.

    python benchmarks/checkpoint_speed.py                   # 10M and 50M parameters, 5 rounds
    python benchmarks/checkpoint_speed.py --sizes 10 --rounds 9 --json out.json
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ampkit.checkpoint._digest import file_digest
from ampkit.checkpoint.folder import verify_checkpoint, write_checkpoint

WIDTH = 1024


def make_state(millions: float) -> tuple[dict[str, torch.Tensor], dict[str, Any], int]:
    """``(weights, state, parameter count)`` after one AdamW step."""
    torch.manual_seed(0)
    layers = max(1, round(millions * 1e6 / (WIDTH * WIDTH + WIDTH)))
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).square().mean().backward()
    optimizer.step()
    count = sum(p.numel() for p in model.parameters())
    state = {"optimizer": optimizer.state_dict(), "trainer": {"step": 1}}
    return dict(model.state_dict()), state, count


def state_bytes(weights: dict[str, torch.Tensor], state: dict[str, Any]) -> int:
    moments = [t for s in state["optimizer"]["state"].values() for t in s.values() if t.numel() > 1]
    return sum(t.numel() * t.element_size() for t in [*weights.values(), *moments])


def ampkit_save(weights: dict, state: dict, where: Path) -> None:
    write_checkpoint(where, 1, weights, state)


def torch_save(weights: dict, state: dict, where: Path) -> None:
    where.mkdir()
    file = where / "checkpoint.pt"
    with open(file, "wb") as f:
        torch.save({"model": weights, "optimizer": state["optimizer"]}, f)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(where, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


VARIANTS: dict[str, Callable[[dict, dict, Path], None]] = {
    "ampkit": ampkit_save,
    "torch.save": torch_save,
}


def timed(save: Callable[[dict, dict, Path], None], weights: dict, state: dict, root: Path):
    where = Path(tempfile.mkdtemp(dir=root)) / "ckpt"
    wall, cpu = time.perf_counter(), time.process_time()
    save(weights, state, where)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    shutil.rmtree(where.parent)
    return wall, cpu


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def peak_extra(save: Callable, weights: dict, state: dict, root: Path) -> float | None:
    """Peak resident memory a save adds, in bytes (None where Linux's counters are missing)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        before = _status_kib("VmRSS")
        timed(save, weights, state, root)
        return (_status_kib("VmHWM") - before) * 1024.0
    except (OSError, KeyError):
        return None


def verify_times(weights: dict, state: dict, root: Path, rounds: int) -> dict[str, float]:
    """Median seconds to verify one checkpoint, and to SHA-256 the same files, interleaved."""
    where = Path(tempfile.mkdtemp(dir=root)) / "ckpt"
    path = write_checkpoint(where, 1, weights, state)
    files = [p for p in path.iterdir() if p.is_file()]
    variants: dict[str, Callable[[], Any]] = {
        "verify_blake3_s": lambda: verify_checkpoint(path),
        "sha256_s": lambda: [file_digest(f, "sha256") for f in files],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    shutil.rmtree(where.parent)
    return {name: statistics.median(t) for name, t in times.items()}


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[10, 50], help="millions")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp folder)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ckpt-speed-", dir=args.dir))
    results = []
    try:
        for millions in args.sizes:
            weights, state, count = make_state(millions)
            size = state_bytes(weights, state)
            for save in VARIANTS.values():  # warm-up: page cache, allocator, imports
                timed(save, weights, state, root)
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
            rng = random.Random(0)
            for _ in range(args.rounds):
                order = list(VARIANTS)
                rng.shuffle(order)
                for name in order:
                    times[name].append(timed(VARIANTS[name], weights, state, root))
            wall = [a[0] / t[0] for a, t in zip(times["ampkit"], times["torch.save"], strict=True)]
            cpu = [a[1] / t[1] for a, t in zip(times["ampkit"], times["torch.save"], strict=True)]
            peaks = {name: peak_extra(VARIANTS[name], weights, state, root) for name in VARIANTS}
            verify = verify_times(weights, state, root, args.rounds)
            results.append(
                {
                    "parameters": count,
                    "state_mb": size / 1e6,
                    "ampkit_wall_s": statistics.median(t[0] for t in times["ampkit"]),
                    "torch_wall_s": statistics.median(t[0] for t in times["torch.save"]),
                    "wall_ratio": quartiles(wall),
                    "cpu_ratio": quartiles(cpu),
                    "peak_extra_x_state": {
                        name: None if peak is None else peak / size for name, peak in peaks.items()
                    },
                    **verify,
                }
            )
            del weights, state
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {args.rounds} interleaved rounds"
    )
    print(
        f"{'params':>8} {'state MB':>9} {'ampkit s':>9} {'torch s':>8} "
        f"{'wall ratio (IQR)':>22} {'CPU ratio (IQR)':>22} {'peak extra x state':>26} "
        f"{'verify s':>9} {'SHA-256 s':>10}"
    )
    for r in results:
        w, c, p = r["wall_ratio"], r["cpu_ratio"], r["peak_extra_x_state"]
        peak = " / ".join("-" if v is None else f"{v:.2f}" for v in p.values())
        print(
            f"{r['parameters'] / 1e6:>7.1f}M {r['state_mb']:>9.0f} {r['ampkit_wall_s']:>9.2f} "
            f"{r['torch_wall_s']:>8.2f} {w[1]:>8.2f} ({w[0]:.2f}-{w[2]:.2f}) "
            f"{c[1]:>10.2f} ({c[0]:.2f}-{c[2]:.2f}) {peak:>17} (ampkit / torch) "
            f"{r['verify_blake3_s']:>9.3f} {r['sha256_s']:>10.3f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

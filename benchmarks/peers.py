"""ampkit vs the hand-written torch.autocast loop, Lightning Fabric and Accelerate (not run by CI).

Same model (the built-in GPT, batch 16 x 128 bytes), same batches, same AdamW, gradient
clipping at 1.0 in every variant, each tool driven the way its documentation shows.

Part 1, step time: every variant trains its own copy of the same weights, one step per
round, interleaved (``ampkit.bench.timing.run_interleaved``: rotated order, a matmul probe
between rounds, rounds where it moved dropped). Reported: median step time and the median of
per-round ratios to the hand-written loop in the same precision.

Part 2, each tool's defaults end to end: the time to set the tool up and train the model for
``--e2e-steps`` steps, with what the tool does when the user names no precision (ampkit:
``"auto"``; Fabric: ``"32-true"``; Accelerate: ``"no"``), and with the peers configured for
bf16 as their docs suggest for speed. Whole runs are interleaved the same way (one run of every
tool per round). Reported: median wall time and the median paired ratio to ampkit's defaults.

``ampkit.Trainer`` joins part 2 when this ampkit has it (``hasattr(ampkit, "Trainer")``).

    pip install torch==2.13.0 && pip install -e ".[bench]"
    python benchmarks/peers.py                           # ~4 minutes on a 2-core CPU
    python benchmarks/peers.py --rounds 20 --e2e-steps 20 --json peers.json
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import platform
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

import ampkit
from ampkit.bench.timing import matmul_probe, run_interleaved
from ampkit.bench.workloads import Workload, gpt_workload
from ampkit.precision.hardware import probe

MAX_NORM = 1.0
Batch = tuple[torch.Tensor, torch.Tensor]
Step = Callable[[Batch], None]


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)


def _gpt_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    return model(*batch)[1]


# -- one function per tool: build it, return a step function --------------------------------


def hand_written(model: torch.nn.Module, precision: str) -> Step:
    """The loop of PyTorch's AMP recipe (bf16 needs no GradScaler; fp32 runs no autocast)."""
    opt = _optimizer(model)
    low = precision == "bf16"

    def step(batch: Batch) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            loss = _gpt_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def ampkit_engine(model: torch.nn.Module, precision: str) -> Step:
    """``ampkit.MixedPrecision``, as in the README."""
    opt = _optimizer(model)
    mp = ampkit.MixedPrecision(precision, "cpu", max_grad_norm=MAX_NORM)

    def step(batch: Batch) -> None:
        with mp.autocast():
            loss = _gpt_loss(model, batch)
        mp.backward(loss)
        mp.step(opt)

    return step


def fabric(model: torch.nn.Module, precision: str | None) -> Step:
    """Lightning Fabric: ``setup`` wraps the forward in the precision's autocast."""
    from lightning.fabric import Fabric

    kwargs = {} if precision is None else {"precision": precision}
    f = Fabric(accelerator="cpu", devices=1, **kwargs)
    wrapped, opt = f.setup(model, _optimizer(model))

    def step(batch: Batch) -> None:
        loss = _gpt_loss(wrapped, batch)
        f.backward(loss)
        f.clip_gradients(wrapped, opt, max_norm=MAX_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def accelerate(model: torch.nn.Module, mixed_precision: str | None) -> Step:
    """Hugging Face Accelerate: ``prepare`` wraps the forward in the precision's autocast.

    Accelerate keeps its configuration in a process-wide singleton; it is reset before each
    ``Accelerator`` so that variants with different precisions can live in one process (the
    autocast context is bound to the model at ``prepare`` time, so earlier ones keep theirs).
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    kwargs = {} if mixed_precision is None else {"mixed_precision": mixed_precision}
    acc = Accelerator(cpu=True, **kwargs)
    wrapped, opt = acc.prepare(model, _optimizer(model))

    def step(batch: Batch) -> None:
        loss = _gpt_loss(wrapped, batch)
        acc.backward(loss)
        acc.clip_grad_norm_(wrapped.parameters(), MAX_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def trainer_run(model: torch.nn.Module, batches: list[Batch]) -> None:
    """``ampkit.Trainer`` with its defaults: the whole run is one ``fit`` call."""
    trainer = ampkit.Trainer(model, _optimizer(model), max_steps=len(batches))
    trainer.fit(batches)


# -- harness ----------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    build: Callable[[torch.nn.Module], Step]
    precision: str  # what the tool really ran: checked on the first step


def _check_precision(model: torch.nn.Module) -> Callable[[], str]:
    """Record the dtype of the first MLP matmul's output on the next forward."""
    seen: list[torch.dtype] = []
    layer = model.blocks[0].mlp.fc  # type: ignore[index,union-attr]
    handle = layer.register_forward_hook(lambda m, i, o: seen.append(o.dtype))

    def result() -> str:
        handle.remove()
        return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[seen[0]]

    return result


def step_variants() -> list[Variant]:
    return [
        Variant("hand-written fp32", lambda m: hand_written(m, "fp32"), "fp32"),
        Variant("hand-written bf16", lambda m: hand_written(m, "bf16"), "bf16"),
        Variant("ampkit.MixedPrecision fp32", lambda m: ampkit_engine(m, "fp32"), "fp32"),
        Variant("ampkit.MixedPrecision bf16", lambda m: ampkit_engine(m, "bf16"), "bf16"),
        Variant("Fabric 32-true", lambda m: fabric(m, "32-true"), "fp32"),
        Variant("Fabric bf16-mixed", lambda m: fabric(m, "bf16-mixed"), "bf16"),
        Variant("Accelerate no", lambda m: accelerate(m, "no"), "fp32"),
        Variant("Accelerate bf16", lambda m: accelerate(m, "bf16"), "bf16"),
    ]


def e2e_variants() -> dict[str, Callable[[torch.nn.Module, list[Batch]], None]]:
    def loop(
        build: Callable[[torch.nn.Module], Step],
    ) -> Callable[[torch.nn.Module, list[Batch]], None]:
        def run(model: torch.nn.Module, batches: list[Batch]) -> None:
            step = build(model)
            for batch in batches:
                step(batch)

        return run

    runs = {
        "ampkit defaults (MixedPrecision auto)": loop(lambda m: ampkit_engine(m, "auto")),
        "hand-written fp32 (PyTorch default)": loop(lambda m: hand_written(m, "fp32")),
        "Fabric defaults (32-true)": loop(lambda m: fabric(m, None)),
        "Accelerate defaults (no)": loop(lambda m: accelerate(m, None)),
        "Fabric bf16-mixed": loop(lambda m: fabric(m, "bf16-mixed")),
        "Accelerate bf16": loop(lambda m: accelerate(m, "bf16")),
    }
    if hasattr(ampkit, "Trainer"):
        runs["ampkit.Trainer defaults"] = trainer_run
    return runs


def measure_steps(workload: Workload, rounds: int, warmup: int, tolerance: float) -> dict:
    variants = step_variants()
    steps: dict[str, Callable[[int], None]] = {}
    checks: dict[str, Callable[[], str]] = {}
    for v in variants:
        model = copy.deepcopy(workload.model)
        checks[v.name] = _check_precision(model)
        step = v.build(model)
        steps[v.name] = lambda i, step=step: step(workload.batch(i))
    timings = run_interleaved(
        steps,
        rounds=rounds,
        warmup=warmup,
        probe=matmul_probe(),
        tolerance=tolerance,
        burst_s=20.0,
        rest_s=5.0,
    )
    ran = {name: check() for name, check in checks.items()}
    for v in variants:
        if ran[v.name] != v.precision:
            raise RuntimeError(f"{v.name} ran its matmuls in {ran[v.name]}, not {v.precision}")
    baseline = {"fp32": "hand-written fp32", "bf16": "hand-written bf16"}
    return {
        "rounds": timings.rounds,
        "rounds_kept": len(timings.kept),
        "probe_spread": max(timings.probes) / min(timings.probes),
        "variants": {
            v.name: {
                "precision": ran[v.name],
                "median_step_ms": 1000 * timings.median(v.name),
                "vs_hand_written": timings.ratio(v.name, baseline[v.precision]),
                "vs_fp32_hand_written": timings.ratio(v.name, "hand-written fp32"),
            }
            for v in variants
        },
    }


def measure_e2e(workload: Workload, steps: int, rounds: int, tolerance: float) -> dict:
    batches = [workload.batch(i) for i in range(steps)]
    runs = e2e_variants()

    fresh: list[torch.nn.Module] = []

    def prepare(name: str, i: int) -> None:  # untimed: a fresh copy of the initial weights
        fresh.append(copy.deepcopy(workload.model))

    def timed(run: Callable[[torch.nn.Module, list[Batch]], None]) -> Callable[[int], None]:
        return lambda i: run(fresh.pop(), batches)  # timed: tool setup + every step

    timings = run_interleaved(
        {name: timed(run) for name, run in runs.items()},
        rounds=rounds,
        warmup=1,
        probe=matmul_probe(),
        tolerance=tolerance,
        prepare=prepare,
        burst_s=20.0,
        rest_s=5.0,
    )
    base = "ampkit defaults (MixedPrecision auto)"
    return {
        "steps": steps,
        "rounds": timings.rounds,
        "rounds_kept": len(timings.kept),
        "probe_spread": max(timings.probes) / min(timings.probes),
        "runs": {
            name: {
                "median_s": timings.median(name),
                "vs_ampkit_defaults": timings.ratio(name, base),
            }
            for name in runs
        },
    }


def versions() -> dict[str, str]:
    import accelerate as acc
    import lightning

    return {
        "machine": probe(torch.device("cpu")).name,
        "threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ampkit": ampkit.__version__,
        "lightning": lightning.__version__,
        "accelerate": acc.__version__,
        "auto picks": ampkit.resolve_precision("auto", "cpu").precision,
        "ampkit.Trainer": "included" if hasattr(ampkit, "Trainer") else "absent in this ampkit",
    }


print = functools.partial(print, flush=True)  # noqa: A001 (tables appear as parts finish)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30, help="timed step rounds (part 1)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--e2e-steps", type=int, default=30, help="steps per run (part 2)")
    parser.add_argument("--e2e-rounds", type=int, default=3, help="timed runs per tool (part 2)")
    parser.add_argument("--probe-tolerance", type=float, default=0.25)
    parser.add_argument("--skip", choices=["steps", "e2e"], default=None)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's). On a shared 2-core machine, 1 thread keeps "
        "a neighbour's load from stalling every matmul at a thread barrier.",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", module="accelerate")
    workload = gpt_workload(batch_size=16, seq_len=128)
    results: dict = {"versions": versions(), "model": workload.description}
    print(" | ".join(f"{k} {v}" for k, v in results["versions"].items()))
    print(f"model: {workload.description}; AdamW, clip 1.0\n")
    if args.skip != "steps":
        part = measure_steps(workload, args.rounds, args.warmup, args.probe_tolerance)
        results["steps"] = part
        print(
            f"step time: {part['rounds_kept']}/{part['rounds']} rounds kept, "
            f"probe spread {part['probe_spread']:.2f}x"
        )
        print(
            "| variant | ran in | median step (ms) | vs hand-written, same precision "
            "| vs hand-written fp32 |"
        )
        print("|---|---|---|---|---|")
        for name, row in part["variants"].items():
            print(
                f"| {name} | {row['precision']} | {row['median_step_ms']:.1f} | "
                f"{row['vs_hand_written']:.3f} | {row['vs_fp32_hand_written']:.2f} |"
            )
        print()
    if args.skip != "e2e":
        part = measure_e2e(workload, args.e2e_steps, args.e2e_rounds, args.probe_tolerance)
        results["e2e"] = part
        print(
            f"end to end, {part['steps']} steps: {part['rounds_kept']}/{part['rounds']} rounds "
            f"kept, probe spread {part['probe_spread']:.2f}x"
        )
        print("| tool, settings | median wall time (s) | vs ampkit defaults |")
        print("|---|---|---|")
        for name, row in part["runs"].items():
            print(f"| {name} | {row['median_s']:.2f} | {row['vs_ampkit_defaults']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

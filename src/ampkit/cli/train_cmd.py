"""``ampkit train``: train the built-in GPT (or one on your text) in the best precision."""

from __future__ import annotations

import sys
from typing import Any

import click

from ampkit.gpt.config import TrainConfig

__all__ = ["train"]

_DEFAULT = TrainConfig.defaults()


def _positive_or_none(value: float) -> float | None:
    return None if value == 0 else value


@click.command()
@click.option(
    "--precision",
    default=_DEFAULT["precision"],
    show_default=True,
    help="auto, fp32, fp16, bf16, fp16-mixed, bf16-mixed, bf16-true (bf16 weights and "
    "optimizer state) or fp8 (fp8-tensorwise, fp8-rowwise, fp8-rowwise-gw-hp; CUDA 8.9+). "
    "auto picks from the hardware (never bf16-true or fp8).",
)
@click.option(
    "--device", default=None, help="cpu, cuda or cuda:N. [default: cuda if available, else cpu]"
)
@click.option(
    "--steps", type=int, default=_DEFAULT["steps"], show_default=True, help="Optimizer steps."
)
@click.option(
    "--batch-size",
    type=int,
    default=_DEFAULT["batch_size"],
    show_default=True,
    help="Sequences per micro-batch.",
)
@click.option(
    "--seq-len",
    type=int,
    default=_DEFAULT["seq_len"],
    show_default=True,
    help="Tokens (bytes) per sequence.",
)
@click.option(
    "--grad-accum",
    type=int,
    default=_DEFAULT["grad_accum"],
    show_default=True,
    help="Micro-batches per optimizer step.",
)
@click.option(
    "--max-grad-norm",
    type=float,
    default=_DEFAULT["max_grad_norm"],
    show_default=True,
    help="Clip the unscaled gradient norm to this; 0 disables clipping.",
)
@click.option(
    "--lr", type=float, default=_DEFAULT["lr"], show_default=True, help="Peak AdamW learning rate."
)
@click.option(
    "--seed",
    type=int,
    default=_DEFAULT["seed"],
    show_default=True,
    help="Seed for weights and batches.",
)
@click.option(
    "--data",
    type=click.Path(dir_okay=False),
    default=None,
    help="A UTF-8 text file to train on. [default: Python's standard-library sources]",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for metrics.jsonl, summary.json, model.safetensors and checkpoints/.",
)
@click.option(
    "--log-every",
    type=int,
    default=_DEFAULT["log_every"],
    show_default=True,
    help="Steps between metric rows.",
)
@click.option(
    "--checkpoint-every",
    type=int,
    default=None,
    help="Write OUT/checkpoints/step-N every N steps (atomic, verified).",
)
@click.option("--keep-last", type=int, default=None, help="Keep only the newest N checkpoints.")
@click.option(
    "--resume",
    default=None,
    help="auto: continue from the newest valid checkpoint in OUT/checkpoints (or start fresh); "
    "or a checkpoint folder.",
)
@click.option(
    "--compile/--no-compile",
    "compile_",
    default=None,
    help="torch.compile the model. [default: on for fp8 on CUDA, else off]",
)
@click.option(
    "--compile-mode",
    type=click.Choice(["default", "reduce-overhead", "max-autotune"]),
    default=None,
    help="torch.compile mode (implies --compile); reduce-overhead uses CUDA graphs.",
)
@click.option(
    "--strategy",
    type=click.Choice(["auto", "ddp", "fsdp", "none"]),
    default=_DEFAULT["strategy"],
    show_default=True,
    help="Data parallelism under torchrun: DDP, FSDP2 (fully_shard) or none.",
)
@click.option(
    "--nproc",
    type=int,
    default=1,
    show_default=True,
    help="Launch N processes with torchrun (DDP); --batch-size is per process.",
)
@click.option(
    "--keep-fp32",
    multiple=True,
    metavar="MODULE",
    help="Run this module of the GPT in fp32 under autocast (repeatable), e.g. head.",
)
@click.option(
    "--detect-nonfinite",
    is_flag=True,
    help="Stop at the first inf/NaN and name the module that produced it.",
)
@click.option(
    "--update-compensation",
    type=click.Choice(["kahan", "stochastic", "none"]),
    default=None,
    help="bf16-true only: Kahan-compensated or stochastically rounded weight updates, or none "
    "(warns: small updates are lost). [default: kahan]",
)
@click.option(
    "--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."
)
def train(**options: Any) -> None:
    """Train a small GPT-style byte-level model with mixed precision.

    With no arguments it trains on the Python standard library's sources in the precision the
    hardware supports best, and finishes in about a minute on a 2-core CPU.

    \b
    Examples:
      ampkit train
      ampkit train --precision bf16 --steps 100 --out runs/bf16
      ampkit train --data notes.txt --grad-accum 4 --max-grad-norm 0.5
      ampkit train --out runs/a --checkpoint-every 50 --keep-last 2
      ampkit train --out runs/a --checkpoint-every 50 --resume auto   # after a crash
      ampkit train --nproc 2 --batch-size 8    # = torchrun --nproc_per_node=2 -m ampkit train
    """
    import os

    nproc = options.pop("nproc")
    if nproc < 1:
        raise click.BadParameter(f"{nproc} is invalid; use 1 or more.", param_hint="--nproc")
    if nproc > 1 and "LOCAL_RANK" not in os.environ:
        sys.exit(_launch_torchrun(nproc))
    from ampkit.gpt.job import train as run_training

    show_progress = options.pop("progress") and os.environ.get("RANK", "0") == "0"
    compile_ = options.pop("compile_")
    options["compile"] = True if options["compile_mode"] is not None else compile_
    options["max_grad_norm"] = _positive_or_none(options["max_grad_norm"])
    config = TrainConfig(**options)
    from ampkit.trainer.callbacks import ProgressBar

    summary = run_training(config, callbacks=[ProgressBar()] if show_progress else [])
    if os.environ.get("RANK", "0") == "0":
        click.echo(_render_summary(summary))


def _launch_torchrun(nproc: int) -> int:
    """Re-run this command under torchrun with ``nproc`` processes; return its exit status."""
    import subprocess

    args = sys.argv[1:]
    cleaned, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--nproc":
            skip = True
            continue
        if arg.startswith("--nproc="):
            continue
        cleaned.append(arg)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "ampkit",
        *cleaned,
    ]
    return subprocess.call(command)


def _render_summary(summary: Any) -> str:
    rows = [
        ("precision", f"{summary.precision} on {summary.device}"),
        ("why", summary.reason),
        ("data", summary.data),
        ("parameters", f"{summary.parameters:,}"),
        ("steps", f"{summary.steps} ({summary.skipped_steps} skipped)"),
        ("final loss", f"{summary.final_loss:.4f}"),
        ("throughput", f"{summary.tokens_per_s:,.0f} tokens/s over {summary.wall_s:.1f} s"),
        (
            "peak memory",
            f"{summary.peak_memory_bytes / 2**20:,.0f} MiB ({summary.peak_memory_kind})",
        ),
    ]
    if summary.precision == "fp16":
        rows.insert(5, ("loss scale", f"{summary.final_scale:g}"))
    if summary.world_size > 1:
        rows.insert(1, ("processes", f"{summary.world_size} (batch per process)"))
    rows.extend(("note", note) for note in summary.notes)
    if summary.out:
        rows.append(("outputs", f"{summary.out}/metrics.jsonl, model.safetensors, summary.json"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.rjust(width)}  {v}" for k, v in rows)

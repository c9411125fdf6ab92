"""``ampkit train``: train the built-in GPT (or one on your text) in the best precision."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["train"]


def _positive_or_none(value: float) -> float | None:
    return None if value == 0 else value


@click.command()
@click.option(
    "--precision",
    default="auto",
    show_default=True,
    help="auto, fp32, fp16, bf16, fp16-mixed or bf16-mixed. auto picks from the hardware.",
)
@click.option(
    "--device", default=None, help="cpu, cuda or cuda:N. [default: cuda if available, else cpu]"
)
@click.option("--steps", type=int, default=300, show_default=True, help="Optimizer steps.")
@click.option(
    "--batch-size", type=int, default=16, show_default=True, help="Sequences per micro-batch."
)
@click.option(
    "--seq-len", type=int, default=128, show_default=True, help="Tokens (bytes) per sequence."
)
@click.option(
    "--grad-accum", type=int, default=1, show_default=True, help="Micro-batches per optimizer step."
)
@click.option(
    "--max-grad-norm",
    type=float,
    default=1.0,
    show_default=True,
    help="Clip the unscaled gradient norm to this; 0 disables clipping.",
)
@click.option("--lr", type=float, default=2e-3, show_default=True, help="Peak AdamW learning rate.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed for weights and batches."
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
    help="Folder for metrics.jsonl, summary.json and model.safetensors.",
)
@click.option(
    "--log-every", type=int, default=10, show_default=True, help="Steps between metric rows."
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
    """
    from ampkit.training import TrainConfig
    from ampkit.training import train as run_training

    show_progress = options.pop("progress")
    options["max_grad_norm"] = _positive_or_none(options["max_grad_norm"])
    config = TrainConfig(**options)
    bar, callback = _progress_bar(config.steps, enabled=show_progress)
    try:
        summary = run_training(config, callbacks=[callback])
    finally:
        bar.close()
    click.echo(_render_summary(summary))


def _progress_bar(total: int, enabled: bool) -> tuple[Any, Any]:
    from tqdm import tqdm

    bar = tqdm(total=total, unit="step", disable=not enabled, dynamic_ncols=True, leave=False)

    def on_step(metrics: Any) -> None:
        postfix = {"loss": f"{metrics.loss:.3f}", "tok/s": f"{metrics.tokens_per_s:,.0f}"}
        if metrics.scale != 1.0:
            postfix["scale"] = f"{metrics.scale:g}"
        bar.set_postfix(postfix, refresh=False)
        bar.update(metrics.step - bar.n)

    return bar, on_step


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
    if summary.out:
        rows.append(("outputs", f"{summary.out}/metrics.jsonl, model.safetensors, summary.json"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.rjust(width)}  {v}" for k, v in rows)

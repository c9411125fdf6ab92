"""``ampkit bench``: how much faster and smaller mixed precision is for a model, measured."""

from __future__ import annotations

from typing import Any

import click

from ampkit.cli.progress import Progress, progress_option

__all__ = ["bench"]


@click.command()
@click.option(
    "--precisions",
    default=None,
    help="Comma-separated: fp32, bf16, fp16, bf16-true, fp8 (or aliases, or auto), e.g. "
    "bf16,fp8 on an H100. fp32 is always measured as the baseline; fp8 converts the Linear "
    "layers its measured plan selects. [default: fp32 plus what auto picks here; where auto picks fp32, bf16 too, "
    "so the verdict is measured]",
)
@click.option(
    "--model",
    default="gpt",
    show_default=True,
    help="gpt (the built-in GPT), convnet (a small conv net), hf:<name> (a Hugging Face model "
    "from its config, random weights: hf:gpt2, hf:bert-base-uncased, hf:t5-small; add :tiny "
    "for 2 layers, :seq_len=N), timm:<name>, or package.module:factory (from the current "
    "folder), a function returning (model, batch), (model, inputs, targets) or an "
    "ampkit.models.resolve.BuiltModel. gpt is the same model in every command (2 layers, "
    "width 128, 128-byte context).",
)
@click.option(
    "--device",
    default=None,
    help="cpu, cuda or cuda:N (NVIDIA, or AMD under ROCm), mps, xpu or xpu:N. "
    "[default: the first of cuda, xpu, mps available, else cpu]",
)
@click.option(
    "--steps",
    type=int,
    default=20,
    show_default=True,
    help="Timed steps per variant before the verdict is first checked (the minimum; exactly "
    "this many with --budget 0).",
)
@click.option(
    "--budget",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds of timed rounds: after --steps, rounds are added until the 95% confidence "
    "interval of the speed-up lies wholly above or below the 1.10x pay-off threshold, or "
    "this budget runs out (the verdict then says how much longer would decide it). 0: "
    "exactly --steps rounds.",
)
@click.option(
    "--warmup", type=int, default=3, show_default=True, help="Untimed warm-up steps per variant."
)
@click.option(
    "--batch-size",
    type=int,
    default=None,
    help="Batch size. [default: gpt 16, convnet 32, hf:/timm: 8]",
)
@click.option("--compile", "compile_", is_flag=True, help="Also run each precision compiled.")
@click.option(
    "--channels-last", is_flag=True, help="Also run each precision channels-last (conv models)."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every measurement (loss curves included) to this JSON file. '-' writes the "
    "JSON to stdout and the table to stderr, so `ampkit bench --json - | jq .` reads only "
    "the JSON.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Draw step time, memory and loss curves into this PNG (needs matplotlib).",
)
@click.option(
    "--probe-tolerance",
    type=float,
    default=0.25,
    show_default=True,
    help="Drop a round when the matmul probe next to it moved by more than this (relative).",
)
@click.option(
    "--clock",
    type=click.Choice(["auto", "cpu", "wall"]),
    default="auto",
    show_default=True,
    help="What steps are timed and judged by. cpu: the timing thread's CPU time with torch on "
    "one thread, which a busy machine does not inflate; wall: wall time; auto: cpu on a CPU "
    "device, wall on a GPU. Wall time is shown either way.",
)
@click.option(
    "--allow-large",
    is_flag=True,
    help="Build an hf: model whose options ask for more than 2,000,000,000 parameters or "
    "1024 layers (estimated from the config before building; refused without this flag).",
)
@progress_option
def bench(**options: Any) -> None:
    """Measure step time, throughput, memory and loss per precision, and say if it pays off.

    Every variant trains its own copy of the same weights on the same batches. Steps run
    interleaved (one step of every variant per round, order rotated) with a matmul probe
    between rounds; rounds where the machine changed speed are dropped, and speed-ups are
    medians of paired per-round ratios. On a CPU steps are timed by CPU time (--clock), so
    other jobs on the machine do not change the verdict. Rounds are added until the 95%
    confidence interval of the speed-up is wholly above or below the 1.10x it takes to pay
    off, or --budget runs out; a verdict still undecided then is called inconclusive and
    says how much longer would decide it.

    \b
    Examples:
      ampkit bench                                  # built-in GPT, fp32 vs the best low precision
      ampkit bench --precisions fp32,bf16,fp16 --steps 30 --json bench.json
      ampkit bench --model convnet --channels-last --plot bench.png
      ampkit bench --model mypkg.models:build --batch-size 64 --compile
      ampkit bench --model hf:gpt2:tiny --precisions fp32,bf16
    """
    from ampkit.bench import run_bench, save_plot
    from ampkit.cli.outputs import check_output, writing

    check_output(options["json_path"], "--json")
    check_output(options["plot_path"], "--plot")
    precisions = options["precisions"]
    parsed = None
    if precisions is not None:
        parsed = [p.strip() for p in precisions.split(",") if p.strip()]
        if not parsed:
            from ampkit.errors import ConfigurationError

            raise ConfigurationError(
                f"--precisions: {precisions!r} names no precision. Use e.g. fp32,bf16."
            )
    with Progress(options["progress"], unit={"rounds": "round"}) as progress:
        report = run_bench(
            options["model"],
            parsed,
            device=options["device"],
            steps=options["steps"],
            warmup=options["warmup"],
            batch_size=options["batch_size"],
            compile=options["compile_"],
            channels_last=options["channels_last"],
            probe_tolerance=options["probe_tolerance"],
            on_round=lambda done, total: progress("rounds", done, total),
            clock=options["clock"],
            allow_large=options["allow_large"],
            budget_s=options["budget"],
        )
    to_stdout = options["json_path"] == "-"
    click.echo(report.render(), err=to_stdout)
    if to_stdout:
        import json

        click.echo(json.dumps(report.to_dict(), indent=2))
    elif options["json_path"]:
        with writing(options["json_path"], "--json"):
            report.write_json(options["json_path"])
        click.echo(f"\njson    {options['json_path']}")
    if options["plot_path"]:
        with writing(options["plot_path"], "--plot"):
            save_plot(report, options["plot_path"])
        click.echo(f"plot    {options['plot_path']}", err=to_stdout)

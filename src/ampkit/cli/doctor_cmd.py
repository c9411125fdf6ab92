"""``ampkit doctor``: where low precision breaks a model, and what to train in instead."""

from __future__ import annotations

from typing import Any

import click

from ampkit.cli.progress import progress_option

__all__ = ["doctor"]


@click.command()
@click.option(
    "--model",
    "model_spec",
    default=None,
    metavar="MODEL",
    help="gpt (the built-in GPT), convnet, hf:<name> (a Hugging Face model from its config, "
    "random weights: hf:gpt2, hf:bert-base-uncased, hf:t5-small; add :tiny for 2 layers), "
    "timm:<name>, or package.module:factory, a function returning (model, closure) or "
    "(model, batch); closure() runs the forward pass and returns the loss. "
    "[default: the built-in GPT]",
)
@click.option(
    "--precision",
    default="fp16",
    show_default=True,
    help="The precision to diagnose: fp16, bf16, fp32 (or an alias), or auto; fp8 (or "
    "fp8-rowwise, fp8-rowwise-gw-hp) adds the per-layer fp8 plan, bf16-true the lost-updates "
    "probe.",
)
@click.option("--steps", type=int, default=3, show_default=True, help="fp32 steps to measure.")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the weights and batches of built-in and hf:/timm: models.",
)
@click.option(
    "--findings-only",
    is_flag=True,
    help="Print only the findings and the recommendation (no per-module table, no map).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the full report as JSON here. '-' writes the JSON to stdout and the "
    "text report to stderr, so `ampkit doctor --json - | jq .` reads only the JSON.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a self-contained HTML report with plots here.",
)
@click.option(
    "--metrics",
    "metrics_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="metrics.jsonl of an `ampkit train --out` run: its loss-scale history is plotted.",
)
@click.option(
    "--map/--no-map",
    "with_map",
    default=True,
    show_default=True,
    help="Also run once under autocast and show the dtype autocast gave each module.",
)
@click.option(
    "--lr",
    type=float,
    default=2e-3,
    show_default=True,
    help="bf16-true: AdamW learning rate of the lost-updates probe (smaller updates are lost "
    "more often).",
)
@click.option(
    "--device",
    default=None,
    help="cpu, cuda or cuda:N (NVIDIA, or AMD under ROCm), mps, xpu or xpu:N; a package."
    "module:factory model stays where its factory put it. [default: cpu]",
)
@click.option(
    "--allow-large",
    is_flag=True,
    help="Build an hf: model whose options ask for more than 2,000,000,000 parameters or "
    "1024 layers (estimated from the config before building; refused without this flag).",
)
@progress_option
def doctor(**options: Any) -> None:
    """Find the layers that break low precision, and say what to train in.

    Runs a few fp32 steps with hooks on every module and measures each module's activations
    and gradients against fp16, bf16 and fp8 (overflow, underflow, error of its output in the
    candidate precision); prints the findings first, then a recommendation (precision, initial
    loss scale, modules to keep in fp32), then the per-module table and the precision map
    (--findings-only stops after the recommendation). The recommendation is a precision this
    device runs well (the hardware facts --precision auto decides by): fp16 on a CPU is
    called slow and bf16 or fp32 advised instead. The model is left unchanged. A
    progress bar on stderr follows the measured steps and the per-module re-runs (only on a
    terminal; --no-progress turns it off).

    \b
    Examples:
      ampkit doctor                                  # the built-in GPT, fp16
      ampkit doctor --precision bf16 --steps 5
      ampkit doctor --model hf:gpt2:tiny --findings-only
      ampkit doctor --model mymodels.vit:make --html doctor.html --json doctor.json
      ampkit doctor --metrics runs/fp16/metrics.jsonl --html doctor.html
      ampkit doctor --precision fp8                  # + which Linear layers to train in fp8
      ampkit doctor --precision bf16-true --lr 1e-4  # + updates pure bf16 would lose
    """
    from dataclasses import replace

    from ampkit.cli.outputs import check_output, writing
    from ampkit.cli.progress import Progress
    from ampkit.doctor import diagnose
    from ampkit.doctor.inputs import load_case, load_scale_history
    from ampkit.errors import AmpkitError, ConfigurationError

    if options["steps"] < 1:
        raise ConfigurationError(f"--steps: {options['steps']} is invalid. Use 1 or more.")
    if abs(options["seed"]) > 2**32 - 1:
        raise ConfigurationError(
            f"--seed: {options['seed']} is invalid. Use an integer from -{2**32 - 1} to "
            f"{2**32 - 1}."
        )
    check_output(options["json_path"], "--json")
    check_output(options["html_path"], "--html", creates_folders=True)
    history = load_scale_history(options["metrics_path"]) if options["metrics_path"] else None
    from ampkit.precision.policy import resolve_device

    device = resolve_device(options["device"]) if options["device"] is not None else None
    try:
        model, closure = load_case(
            options["model_spec"],
            seed=options["seed"],
            device=device,
            allow_large=options["allow_large"],
        )
        with Progress(options["progress"], unit={"fp32 steps": "step"}) as progress:
            report = diagnose(
                model,
                closure,
                options["precision"],
                steps=options["steps"],
                with_precision_map=options["with_map"] and not options["findings_only"],
                lr=options["lr"],
                progress=progress,
            )
    except AmpkitError as exc:
        raise _as_doctor(exc) from None
    if history is not None:
        report = replace(report, scale_history=history)
    to_stdout = options["json_path"] == "-"
    click.echo(report.to_text(findings_only=options["findings_only"]), err=to_stdout)
    if to_stdout:
        click.echo(report.to_json())
    elif options["json_path"]:
        with writing(options["json_path"], "--json"):
            report.to_json(options["json_path"])
        click.echo(f"\nwrote {options['json_path']}")
    if options["html_path"]:
        with writing(options["html_path"], "--html"):
            path = report.to_html(options["html_path"])
        click.echo(f"wrote {path}", err=to_stdout)


def _as_doctor(exc: Exception) -> Exception:
    """An error of the diagnosis as ``ampkit doctor`` says it: ``doctor: ...`` (the library
    names its function, ``diagnose: ...``, or the part that failed, ``loss: ...``). Errors
    about an argument keep it (the command line speaks it as the flag, ``--model: ...``)."""
    if getattr(exc, "argument", None) is None and exc.args and isinstance(exc.args[0], str):
        message = exc.args[0].removeprefix("diagnose: ")
        exc.args = (f"doctor: {message}", *exc.args[1:])
    return exc

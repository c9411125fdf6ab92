"""``ampkit report``: a run's plots, runs side by side, and a convergence verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ampkit.cli.progress import progress_option

__all__ = ["report"]


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option(
    "--out",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the self-contained HTML page here (plots inline, no network).",
)
@click.option(
    "--png",
    "png_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write each plot as DIR/<series>.png (for papers and CI logs).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the runs' facts and the verdicts as JSON here; '-' writes the JSON to "
    "stdout and the text to stderr.",
)
@click.option(
    "--align",
    type=click.Choice(["step", "tokens"]),
    default="step",
    show_default=True,
    help="The x axis: optimizer steps, or tokens (from each run's batch size, sequence length, "
    "accumulation and processes).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="A name per run for the page, in the order of RUNS (default: the folder names).",
)
@click.option(
    "--points",
    type=int,
    default=2000,
    show_default=True,
    help="Most points drawn per series; longer series become min/max envelopes (a spike is "
    "never dropped).",
)
@progress_option
def report(**options: Any) -> None:
    """Plot runs side by side and say whether each one's loss is within the noise of the first.

    RUNS are folders written by `ampkit train --out DIR` (metrics.jsonl and summary.json) or
    metrics.jsonl files. Runs whose settings differ only in --seed form a seed set; the first
    setting is the reference. The verdict ("within noise", "worse by X (Y sigma)",
    "inconclusive: run N seeds") measures the noise across the seeds of each setting, or, with
    one run, along the curve itself; the method is printed on the page. Reads files only
    (no torch).

    \b
    Examples:
      ampkit report runs/fp32 runs/bf16 --out report.html
      ampkit report runs/fp32-s* runs/bf16-s* --out seeds.html --png plots/
      ampkit report runs/a --json - | jq .verdicts
    \b
    A seed set (a shell loop over --seed):
      for s in 0 1 2; do ampkit train --precision bf16 --seed $s --out runs/bf16-s$s; done
    """
    from ampkit.cli.outputs import check_output, writing
    from ampkit.cli.progress import Progress
    from ampkit.errors import ConfigurationError
    from ampkit.runs import report as make_report

    check_output(options["html_path"], "--out", creates_folders=True)
    check_output(options["json_path"], "--json")
    if options["png_dir"] is not None:  # click refused a file already
        check_output(str(Path(options["png_dir"]) / "loss.png"), "--png", creates_folders=True)
    labels, runs = list(options["labels"]), list(options["runs"])
    if labels and len(labels) != len(runs):
        raise ConfigurationError(
            f"--label: {len(labels)} given for {len(runs)} runs. Give one --label per run, in "
            "the order of RUNS, or none."
        )
    with Progress(options["progress"], unit={"reading runs": "run"}) as progress:
        result = make_report(
            runs,
            align=options["align"],
            labels=labels or None,
            points=options["points"],
            progress=progress,
        )
    to_stdout = options["json_path"] == "-"
    click.echo(result.to_text(), err=to_stdout)
    if to_stdout:
        click.echo(result.to_json())
    elif options["json_path"]:
        with writing(options["json_path"], "--json"):
            with open(options["json_path"], "w", encoding="utf-8") as file:
                file.write(result.to_json() + "\n")
        click.echo(f"wrote {options['json_path']}")
    if options["html_path"]:
        with writing(options["html_path"], "--out"):
            path = result.to_html(options["html_path"])
        click.echo(f"wrote {path}", err=to_stdout)
    if options["png_dir"]:
        with writing(options["png_dir"], "--png"):
            paths = result.write_pngs(options["png_dir"])
        click.echo(f"wrote {len(paths)} plots to {options['png_dir']}", err=to_stdout)

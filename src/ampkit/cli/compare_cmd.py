"""``ampkit compare``: where two settings of one model (precisions, eager and compiled,
checkpoints) first part ways."""

from __future__ import annotations

from typing import Any

import click

from ampkit.cli.progress import progress_option

__all__ = ["compare"]


@click.command()
@click.argument("records", nargs=-1, type=click.Path(file_okay=False))
@click.option(
    "--model",
    "model_spec",
    default="gpt",
    show_default=True,
    metavar="MODEL",
    help="gpt, convnet, hf:<name>[:tiny], timm:<name>, or package.module:factory (as "
    "`ampkit doctor --model`).",
)
@click.option(
    "--a",
    "side_a",
    default="fp32",
    show_default=True,
    metavar="SETTING",
    help="The reference side: PRECISION[+compile][@WEIGHTS], e.g. fp32, compile (fp32 under "
    "torch.compile), bf16@runs/a (a run's weights).",
)
@click.option(
    "--b",
    "side_b",
    default="bf16",
    show_default=True,
    metavar="SETTING",
    help="The side compared with the reference: fp16, bf16, bf16-true, fp8, bf16+compile, ...",
)
@click.option(
    "--record",
    "record_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Record only the --a side into this folder (no comparison); compare two such "
    "folders later with `ampkit compare DIR_A DIR_B`, from any process or machine.",
)
@click.option(
    "--tolerance",
    type=float,
    default=8.0,
    show_default=True,
    help="Where two tensors part: relative error above this many eps of the narrower "
    "compute format (bf16 eps 7.8e-3, fp16 9.8e-4, fp32 1.2e-7).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of weights and batch.")
@click.option(
    "--batch-size", type=int, default=None, help="Samples in the batch. [default: the model's]"
)
@click.option("--device", default=None, help="cpu, cuda, cuda:N, mps or xpu. [default: cpu]")
@click.option(
    "--max-values",
    type=int,
    default=4096,
    show_default=True,
    help="Values kept per tensor for the error statistics (memory bound of a record).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the comparison as JSON here; '-' writes the JSON to stdout and the text "
    "to stderr.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a self-contained HTML page here.",
)
@progress_option
def compare(**options: Any) -> None:
    """Find the first module where two settings of one model part ways.

    Runs one batch forward and backward from the same weights under --a and --b, records every
    module's output and parameter gradients (hashes, ranges, a bounded sample), and prints the
    first module whose output leaves the expected error of the narrower format, the first
    gradients that do (in backward order) and the modules that add the most error. With two
    RECORDS folders (written by --record), compares them instead of running anything. Exits 1
    when the sides part, 0 when they agree within the tolerance.

    \b
    Examples:
      ampkit compare --model gpt --a fp32 --b bf16
      ampkit compare --a bf16 --b bf16+compile --html compare.html
      ampkit compare --model mymodels.vit:make --a fp32 --b fp16 --json -
      ampkit compare --a fp32@runs/a --b fp32@runs/b          # two checkpoints
      ampkit compare --a bf16 --record rec/eager               # in one process or machine
      ampkit compare --a bf16+compile --record rec/compiled    # in another
      ampkit compare rec/eager rec/compiled
    """
    from ampkit.cli.outputs import check_output, writing
    from ampkit.cli.progress import Progress
    from ampkit.errors import ConfigurationError

    records = options["records"]
    if records and len(records) != 2:
        raise ConfigurationError(
            f"RECORDS: {len(records)} folder(s) given. Pass two folders written by --record "
            "(A, the reference, then B), or none to run --a and --b."
        )
    if records and options["record_dir"]:
        raise ConfigurationError(
            "--record: writes a new record, and RECORDS compares two existing ones. Use one."
        )
    if options["max_values"] < 16:
        raise ConfigurationError(
            f"--max-values: {options['max_values']} is invalid. Use 16 or more."
        )
    check_output(options["json_path"], "--json")
    check_output(options["html_path"], "--html", creates_folders=True)
    from ampkit.divergence import compare as run_compare
    from ampkit.divergence import compare_records, parse_setting, record

    if options["record_dir"]:
        parse_setting(options["side_a"], "a")
        side = record(
            options["model_spec"],
            options["side_a"],
            out=options["record_dir"],
            device=options["device"],
            seed=options["seed"],
            batch_size=options["batch_size"],
            max_values=options["max_values"],
        )
        click.echo(
            f"recorded {options['side_a']} of {options['model_spec']}: {len(side.entries)} "
            f"tensors -> {options['record_dir']}"
        )
        return
    with Progress(options["progress"], unit={"sides": "side"}) as progress:
        if records:
            result = compare_records(records[0], records[1], tolerance=options["tolerance"])
        else:
            result = run_compare(
                options["model_spec"],
                options["side_a"],
                options["side_b"],
                device=options["device"],
                seed=options["seed"],
                batch_size=options["batch_size"],
                tolerance=options["tolerance"],
                max_values=options["max_values"],
                progress=progress,
            )
    to_stdout = options["json_path"] == "-"
    click.echo(result.to_text(), err=to_stdout)
    if to_stdout:
        click.echo(result.to_json())
    elif options["json_path"]:
        with writing(options["json_path"], "--json"):
            result.to_json(options["json_path"])
        click.echo(f"wrote {options['json_path']}")
    if options["html_path"]:
        with writing(options["html_path"], "--html"):
            path = result.to_html(options["html_path"])
        click.echo(f"wrote {path}", err=to_stdout)
    click.get_current_context().exit(1 if result.parted or result.diff.reference_nonfinite else 0)

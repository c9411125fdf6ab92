"""``ampkit export``: a trained model to an fp16/bf16 ONNX file (or ExportedProgram), checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ampkit.cli.progress import progress_option

if TYPE_CHECKING:
    from torch import nn

__all__ = ["export"]


class _FormatChoice(click.Choice):
    """``--format``'s choices: the names registered in :mod:`ampkit.deploy.export_formats`, read when
    click first needs them (importing ``ampkit.deploy`` imports torch, which ``ampkit --help``
    and the other commands should not pay for)."""

    def __init__(self) -> None:
        super().__init__(())

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        from ampkit.deploy.export_formats import format_names

        return format_names()

    @choices.setter
    def choices(self, value: object) -> None:  # click.Choice.__init__ assigns; the registry rules
        pass


@click.command("export")
@click.option(
    "--model",
    "model_spec",
    default="gpt",
    show_default=True,
    metavar="gpt|MODULE:FACTORY",
    help="gpt: the built-in GPT (the gpt of every command: 2 layers, width 128, 128-byte context; with --checkpoint, the trained one); hf:NAME, timm:NAME or convnet (random weights, no download); or package.module:factory returning (model, example_inputs).",
)
@click.option(
    "--checkpoint",
    default=None,
    metavar="RUN_OR_CHECKPOINT",
    help="A run folder (ampkit train --out DIR), DIR/checkpoints/step-N or a .safetensors file "
    "with the fp32 weights. [default: the model as built]",
)
@click.option(
    "--precision",
    default="fp16",
    show_default=True,
    help="fp16, bf16 or fp32 (weights and compute; see docs/export.md for what stays fp32).",
)
@click.option(
    "--format",
    "format_",
    type=_FormatChoice(),
    default="onnx",
    show_default=True,
    help="onnx (torch's dynamo exporter) or torch-export (ExportedProgram under autocast); "
    "the formats registered in ampkit.deploy.export_formats.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="The file to write: .onnx for --format onnx, .pt2 for torch-export (another suffix is "
    "refused). Checked writable before the export starts; written only if the parity check "
    "passes.",
)
@click.option(
    "--keep-fp32",
    multiple=True,
    metavar="MODULE",
    help="Keep this module in fp32 (repeatable). [default: the modules `ampkit doctor` flags]",
)
@click.option(
    "--keep-io-types/--no-keep-io-types",
    default=True,
    show_default=True,
    help="Keep the graph's floating inputs and outputs fp32.",
)
@click.option(
    "--batches",
    type=int,
    default=8,
    show_default=True,
    help="Parity batches (held-out text for the GPT, random for a factory) besides the example.",
)
@click.option("--check/--no-check", default=True, show_default=True, help="Run the parity check.")
@click.option(
    "--dynamic-batch",
    is_flag=True,
    help="Export with a dynamic batch dimension (dimension 0 of every input).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the result and the parity table as JSON here. '-' writes the JSON to "
    "stdout and the text to stderr, so `ampkit export ... --json - | jq .` reads only the JSON.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random inputs.")
@click.option(
    "--device",
    default=None,
    help="cpu (the default): the export is traced and checked on the CPU; a GPU is refused "
    "with the reason.",
)
@click.option(
    "--allow-large",
    is_flag=True,
    help="Build an hf: model whose options ask for more than 2,000,000,000 parameters or "
    "1024 layers (estimated from the config before building; refused without this flag).",
)
@progress_option
def export(**options: Any) -> None:
    """Export a model in fp16/bf16 and check it against the fp32 model.

    The low-precision graph keeps normalisations, softmax, reductions, pow/sqrt/exp and the
    modules the doctor flags in fp32, and its inputs and outputs fp32. The parity check runs
    the exported file (ONNX Runtime on the CPU, or torch.export.load) on the example and on
    --batches more, and compares every output with the fp32 model: max abs and rel error,
    top-1 agreement, non-finite values. It exits 1 and writes nothing when the check fails.

    \b
    Examples:
      ampkit train --out runs/a && ampkit export --checkpoint runs/a --out gpt-fp16.onnx
      ampkit export --checkpoint runs/a --precision bf16 --out gpt-bf16.onnx --json -
      ampkit export --checkpoint runs/a/checkpoints/step-00000300 --out gpt.onnx
      ampkit export --model mymodels.vit:make --keep-fp32 head --dynamic-batch --out vit.onnx
      ampkit export --model hf:bert-base-uncased:tiny --out bert-fp16.onnx
      ampkit export --checkpoint runs/a --format torch-export --out gpt-fp16.pt2
    """
    from ampkit.cli.outputs import check_output
    from ampkit.cli.progress import Progress
    from ampkit.deploy import export as run_export
    from ampkit.deploy.sources import fit as fit_weights
    from ampkit.deploy.sources import (
        held_out_batches,
        load_factory,
        load_gpt,
        read_weights_and_config,
    )
    from ampkit.errors import ConfigurationError, ParityError

    if options["batches"] < 0:
        raise ConfigurationError(f"--batches: {options['batches']} is invalid. Use 0 or more.")
    _check_suffix(options["out"], options["format_"])
    check_output(options["out"], "--out", creates_folders=True)
    check_output(options["json_path"], "--json")
    if options["device"] is not None:
        from ampkit.precision.policy import resolve_device

        device = resolve_device(options["device"])
        if device.type != "cpu":
            raise ConfigurationError(
                f"--device: {options['device']!r}: ampkit export traces the model and checks "
                "parity on the CPU (ONNX Runtime's CPU provider, torch.export.load), so a GPU "
                "would not be used. Leave --device out or pass --device cpu."
            )
    model: nn.Module
    if options["model_spec"] == "gpt":
        model, seq_len = load_gpt(options["checkpoint"], seed=options["seed"])
        batches = held_out_batches(options["batches"] + 1, 4, seq_len)
        example, parity_batches = (batches[0],), [(b,) for b in batches[1:]]
    else:
        model, example = load_factory(options["model_spec"], allow_large=options["allow_large"])
        parity_batches = options["batches"]
        if options["checkpoint"]:
            weights, file, _ = read_weights_and_config(options["checkpoint"])
            fit_weights(model, weights, file)
    dynamic = None
    if options["dynamic_batch"]:
        import torch

        batch = torch.export.Dim("batch")
        count = len(example) if isinstance(example, (tuple, list, dict)) else 1
        dynamic = tuple({0: batch} for _ in range(count))
    try:
        with Progress(options["progress"], unit={"parity batches": "batch"}) as bar:
            result = run_export(
                model,
                example,
                options["out"],
                precision=options["precision"],
                format=options["format_"],
                keep_fp32=list(options["keep_fp32"]) or None,
                keep_io_types=options["keep_io_types"],
                check=options["check"],
                parity_batches=parity_batches,
                dynamic_shapes=dynamic,
                seed=options["seed"],
                progress=bar,
            )
    except ParityError as exc:
        if exc.result is not None:
            _report(exc.result, options["json_path"])
        raise
    _report(result, options["json_path"])


def _check_suffix(out: str, format_name: str) -> None:
    """Refuse an ``--out`` whose suffix is not the one ``--format`` writes."""
    from pathlib import Path

    from ampkit.deploy.export_formats import FORMATS, get_format
    from ampkit.errors import ConfigurationError

    suffix = get_format(format_name).suffix
    path = Path(out)
    if path.suffix.lower() == suffix.lower():
        return
    seen = f"ends in {path.suffix!r}" if path.suffix else "has no suffix"
    other = [name for name, f in FORMATS.items() if f.suffix.lower() == path.suffix.lower()]
    fix = f" or --format {other[0]}" if other else ""
    raise ConfigurationError(
        f"--out: {out} {seen}, but --format {format_name} writes {suffix} files. Pass "
        f"--out {path.with_name(path.stem + suffix)}{fix}."
    )


def _report(result: Any, json_path: str | None) -> None:
    if json_path == "-":  # the JSON alone on stdout (`| jq .`), the text on stderr
        click.echo(result.to_text(), err=True)
        click.echo(result.to_json())
        return
    click.echo(result.to_text())
    if json_path:
        from pathlib import Path

        from ampkit._files import atomic_write

        atomic_write(Path(json_path), result.to_json() + "\n")
        click.echo(f"\nwrote {json_path}")

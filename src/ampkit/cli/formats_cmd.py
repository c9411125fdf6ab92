"""``ampkit formats``: range and precision of fp32, fp16, bf16 and fp8, computed from torch."""

from __future__ import annotations

import json

import click

__all__ = ["formats"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the table as a JSON array.")
def formats(as_json: bool) -> None:
    """Show the floating-point formats used in mixed precision.

    Bits, largest value, smallest normal and subnormal, machine epsilon, decimal digits and
    whether loss scaling is needed: all computed from torch.finfo on this install.

    \b
    Examples:
      ampkit formats
      ampkit formats --json | python -m json.tool
    """
    from ampkit.precision.float_formats import format_table, number_formats

    table = number_formats()
    if as_json:
        click.echo(json.dumps([f.to_dict() for f in table], indent=2))
    else:
        click.echo(format_table(table))

"""Fixed-width text tables for the terminal reports (formats, doctor, bench, export, fp8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = ["text_table"]


def text_table(
    rows: Sequence[Sequence[str]],
    *,
    rule: bool = True,
    right: Sequence[int] = (),
) -> list[str]:
    """Lay out ``rows`` (the first is the header) in columns two spaces apart.

    Args:
        rows: the header, then one sequence of cells per row, all of the same length.
        rule: put a line of dashes under the header.
        right: indices of the columns aligned right (numbers); the others align left.

    Returns:
        The lines, without trailing spaces.

    Raises:
        ValueError: the rows do not all have the header's number of cells.
    """
    if not rows:
        return []
    columns = len(rows[0])
    if any(len(row) != columns for row in rows):
        lengths = sorted({len(row) for row in rows})
        raise ValueError(f"text_table: rows of {lengths} cells; every row needs {columns}")
    widths = [max(len(row[i]) for row in rows) for i in range(columns)]
    sides: list[Literal["l", "r"]] = ["r" if i in right else "l" for i in range(columns)]
    lines = [
        "  ".join(
            cell.rjust(width) if side == "r" else cell.ljust(width)
            for cell, width, side in zip(row, widths, sides, strict=True)
        ).rstrip()
        for row in rows
    ]
    if rule:
        lines.insert(1, "  ".join("-" * width for width in widths))
    return lines

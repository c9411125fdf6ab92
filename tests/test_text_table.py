"""The terminal reports' fixed-width table."""

from __future__ import annotations

import pytest

from ampkit._text_table import text_table


def test_columns_are_as_wide_as_their_widest_cell_with_a_rule_under_the_header():
    lines = text_table([("name", "ms"), ("fp32", "12.5"), ("bf16-mixed", "8")], right=[1])
    assert lines == [
        "name          ms",
        "----------  ----",
        "fp32        12.5",
        "bf16-mixed     8",
    ]


def test_no_rule_and_no_trailing_spaces():
    assert text_table([("a", "bb"), ("ccc", "")], rule=False) == ["a    bb", "ccc"]


def test_ragged_rows_are_refused():
    with pytest.raises(ValueError, match=r"rows of \[1, 2\] cells; every row needs 2"):
        text_table([("a", "b"), ("c",)])

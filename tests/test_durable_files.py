"""Durable writes: the target holds the old or the complete new content, never a torn one."""

from __future__ import annotations

import json
import math

import pytest

from ampkit._files import atomic_write, json_safe, write_json


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    atomic_write(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_failing_writer_keeps_the_old_file_and_cleans_up(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def half_then_fail(f):
        f.write(b"ne")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(target, half_then_fail)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_json_safe_makes_strict_json():
    value = {"a": math.nan, 1: (1.0, math.inf), "b": [{"c": -math.inf}]}
    assert json_safe(value) == {"a": None, "1": [1.0, None], "b": [{"c": None}]}


def test_write_json_round_trips(tmp_path):
    path = write_json(tmp_path / "s.json", {"loss": math.nan, "steps": 3})
    assert json.loads(path.read_text()) == {"loss": None, "steps": 3}

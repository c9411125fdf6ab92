"""``--json -`` is standard output in every command (issue 22 item 8): the JSON alone on
stdout (``ampkit doctor --json - | jq .`` works), the text report on stderr, and no file
named ``-``."""

from __future__ import annotations

import json

import pytest
import torch
from faults import cli
from torch import nn


def tiny():
    """A classifier of 4 features, importable as ``test_faults_outputs:tiny``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return model, torch.randn(8, 4), torch.randint(0, 3, (8,))


COMMANDS = {
    "doctor": (["--steps", "1", "--no-map"], "recommendation"),
    "bench": (["--steps", "3", "--warmup", "1", "--precisions", "fp32", "--device", "cpu",
               "--no-progress"], "schema"),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_json_dash_is_the_json_alone_on_stdout(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, key = COMMANDS[command]
    result = cli(command, "--model", "test_faults_outputs:tiny", *args, "--json", "-")
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)  # before: the text report, and a file named '-'
    assert key in data
    assert result.stderr.strip()  # the text report went to stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_says_what_json_dash_does(command):
    result = cli(command, "--help")
    assert "'-' writes the JSON to stdout" in " ".join(result.stdout.split())

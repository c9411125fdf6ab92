"""``--model package.module:factory`` faults in ``ampkit doctor`` and ``ampkit bench`` (issue 22
item 3): a factory that builds on the meta device, exits or raises is one line naming it, with
a non-zero exit; the doctor's own errors begin ``doctor:``."""

from __future__ import annotations

import pytest
import torch
from faults import cli, error_line
from torch import nn


class Strange(BaseException):
    """Not an Exception: what a library's own control flow might raise."""


def meta_model():
    with torch.device("meta"):
        model = nn.Linear(4, 2)
    return model, torch.randn(3, 4), torch.randint(0, 2, (3,))


def meta_inputs():
    return nn.Linear(4, 2), torch.randn(3, 4, device="meta"), torch.randint(0, 2, (3,))


def exits_0():
    raise SystemExit(0)


def exits_message():
    raise SystemExit("usage: train.py [--lr LR]")


def raises_base_exception():
    raise Strange("stopped")


def raises_value_error():
    raise ValueError("no config file\nsecond line")


def interrupted():
    raise KeyboardInterrupt


def closure_returns_logits():
    model = nn.Linear(4, 2)
    return model, lambda: model(torch.randn(3, 4))


def model_returns_no_loss():
    return nn.Linear(4, 2), torch.randn(3, 4)


SPEC = "test_faults_factories:{}"

CASES = [
    ("meta_model", "--model: {spec}'s model is on the meta device (no data): 'weight' and 1 "
                   "more hold no values"),
    ("meta_inputs", "--model: {spec}'s inputs are on the meta device (no data): 1 tensor(s) "
                    "(3x4)"),
    ("exits_0", "--model: the factory {spec} raised SystemExit(0) (it called sys.exit()"),
    ("exits_message", "raised SystemExit('usage: train.py [--lr LR]')"),
    ("raises_base_exception", "--model: the factory {spec} raised Strange: stopped. Fix the "
                              "factory"),
    ("raises_value_error", "the factory {spec} raised ValueError: no config file .... Fix"),
]  # fmt: skip


@pytest.mark.parametrize("command", ["doctor", "bench"])
@pytest.mark.parametrize(("factory", "expected"), CASES)
def test_a_broken_factory_is_one_line_naming_it(command, factory, expected):
    spec = SPEC.format(factory)
    extra = ["--steps", "1"] if command == "doctor" else ["--steps", "3", "--no-progress"]
    result = cli(command, "--model", spec, *extra)  # before: a traceback, or exit 0 silently
    assert result.code == 2
    assert expected.format(spec=spec) in error_line(result)
    assert result.stdout == ""


def test_ctrl_c_in_a_factory_stays_an_interruption():
    result = cli("doctor", "--model", SPEC.format("interrupted"), "--steps", "1")
    assert result.code == 130 and "interrupted (Ctrl-C)" in error_line(result)


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("closure_returns_logits", "doctor: closure() returned a tensor of shape (3, 2)"),
        ("model_returns_no_loss", "doctor: loss: the model returned Tensor, which holds no "
                                  "scalar loss"),
    ],
)  # fmt: skip
def test_doctor_errors_begin_with_doctor(factory, expected):
    result = cli("doctor", "--model", SPEC.format(factory), "--steps", "1")
    assert result.code == 2
    line = error_line(result)
    assert line.startswith(f"ampkit: error: {expected}")  # before: "diagnose: ...", "loss: ..."
    assert "Trainer" not in line


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import sys\nsys.exit(0)\n", "raised SystemExit(0). Make the module importable"),
        ("raise RuntimeError('no GPU found')\n", "raised RuntimeError: no GPU found."),
        ("import ampkit_no_such_dependency\n", "it imports 'ampkit_no_such_dependency', which "
                                               "is not installed"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["doctor", "bench", "export"])
def test_a_module_that_exits_or_fails_on_import_is_one_line(
    command, source, expected, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the factory's module is imported from the current folder
    name = f"broken_at_import_{abs(hash((command, source)))}"
    (tmp_path / f"{name}.py").write_text(source + "def make():\n    pass\n")
    extra = {"doctor": ["--steps", "1"], "bench": ["--steps", "3", "--no-progress"],
             "export": ["--out", str(tmp_path / "m.onnx")]}[command]  # fmt: skip
    result = cli(command, "--model", f"{name}:make", *extra)
    assert result.code == 2  # before: exit 0 silently, or a traceback
    line = error_line(result)
    assert f"--model: importing module {name!r} for {name}:make" in line and expected in line

"""``ampkit export`` faults (issue 22 items 1, 7 and 8): weights or a reference holding NaN
never pass as "ok", an unwritable or misnamed ``--out`` fails before any work, a full disk
names the file, and temporary files of killed exports are cleaned up, only those."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest
import torch
from faults import TINY, cli, error_line
from test_faults_disk_full import disk, fill  # noqa: F401  (disk: a fixture)
from torch import nn

import ampkit
from ampkit.errors import ConfigurationError, NonFiniteWeightsError, ParityError, StorageError

#: How often a factory of this module was called (the export started its work).
CALLS = {"mlp": 0}


def mlp() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """A small classifier, importable as ``--model test_faults_export:mlp``."""
    CALLS["mlp"] += 1
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (torch.randn(4, 8),)


class SqrtHead(nn.Module):
    """Finite weights, but the fp32 output is NaN wherever the linear layer is negative."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(self.linear(x))


def _export(model: nn.Module, path, **kwargs):
    kwargs = {"precision": "fp32", "format": "torch-export", "keep_fp32": [], **kwargs}
    return ampkit.export(model, (torch.randn(4, 8),), path, parity_batches=1, **kwargs)


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    """A finished ``ampkit train --out`` run whose model.safetensors holds a NaN bias."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("runs") / "a"
    assert cli("train", *TINY, "--out", str(out)).code == 0
    weights = load_file(out / "model.safetensors")
    bias = next(k for k in sorted(weights) if k.endswith(".bias"))
    weights[bias][0] = float("nan")
    save_file(weights, out / "model.safetensors")
    return out, bias


def test_weights_file_with_a_nan_bias_is_refused_naming_the_tensor(nan_run, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxconverter_common")
    run, bias = nan_run
    out = tmp_path / "g.onnx"
    result = cli("export", "--checkpoint", str(run / "model.safetensors"), "--out", str(out),
                 "--batches", "1")  # fmt: skip
    assert result.code == 1, result.stdout  # before: exit 0, "non-finite 0, ok"
    line = error_line(result)
    file = run / "model.safetensors"
    assert f"--checkpoint: {file} holds inf/NaN in 1 tensor(s): {bias!r} (1 NaN of" in line
    assert not out.exists()


def test_library_export_names_the_first_non_finite_tensors_and_the_count(tmp_path):
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(7)])
    with torch.no_grad():
        for layer in model:
            layer.bias[0] = float("inf")
    with pytest.raises(NonFiniteWeightsError) as caught:
        _export(model, tmp_path / "m.pt2")
    message = str(caught.value)
    assert "7 weight tensor(s) hold inf/NaN: '0.bias' (1 inf/NaN of 8)" in message
    assert "'4.bias'" in message and "'5.bias'" not in message and "and 2 more" in message
    assert list(tmp_path.iterdir()) == []


def test_a_non_finite_fp32_reference_fails_the_parity_check(tmp_path):
    torch.manual_seed(0)
    with pytest.raises(ParityError) as caught:  # before: passed, the NaNs were skipped
        _export(SqrtHead(), tmp_path / "sqrt.pt2")
    assert "the fp32 reference itself is non-finite in output(s) output" in str(caught.value)
    (report,) = caught.value.result.parity
    (row,) = report.outputs
    assert not row.passed and row.reference_nonfinite > 0
    assert "FAIL" in report.to_text() and "fp32 reference itself holds inf/NaN" in report.to_text()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("{tmp}/g.txt", "--out: {tmp}/g.txt ends in '.txt', but --format onnx writes .onnx "
                        "files. Pass --out {tmp}/g.onnx."),
        ("{tmp}/g.pt2", "Pass --out {tmp}/g.onnx or --format torch-export."),
        ("{tmp}/g", "--out: {tmp}/g has no suffix"),
        ("{tmp}/a_file/g.onnx", "--out: cannot write {tmp}/a_file/g.onnx: {tmp}/a_file is a "
                                "file, not a folder"),
        ("/proc/ampkit-no-such/g.onnx", "--out: cannot write /proc/ampkit-no-such/g.onnx: the "
                                        "folder /proc refuses new files"),
    ],
)  # fmt: skip
def test_unusable_out_is_one_line_before_the_model_is_built(tmp_path, out, expected):
    (tmp_path / "a_file").write_text("x")
    CALLS["mlp"] = 0
    result = cli("export", "--model", "test_faults_export:mlp",
                 "--out", out.format(tmp=tmp_path))  # fmt: skip
    assert result.code == 2
    assert expected.format(tmp=tmp_path) in error_line(result)
    assert CALLS["mlp"] == 0  # before: the model was built, traced and checked first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_library_export_checks_its_path_before_any_work(tmp_path):
    calls = []

    class Counted(nn.Linear):
        def forward(self, x):
            calls.append(1)
            return super().forward(x)

    for path, expected in [
        (tmp_path / "m.txt", "ends in '.txt', but format 'torch-export' writes .pt2 files"),
        ("/proc/ampkit-no-such/m.pt2", "the folder /proc refuses new files"),
    ]:
        with pytest.raises(ConfigurationError, match=expected):
            _export(Counted(8, 4), path)
    assert calls == [] and list(tmp_path.iterdir()) == []


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temporaries_of_killed_exports_are_removed_and_nothing_else(tmp_path):
    dead, alive, init = _dead_pid(), os.getppid(), 1
    stale = [
        f".g.pt2.tmp-{dead}",  # its writer was killed
        f".other.onnx.tmp-{dead}",  # another export's, in the same folder
        f".g.onnx.tmp-{alive}",  # two hours old: the PID was reused since
    ]
    kept = [
        f".g.pt2.tmp-{init}",  # a live process's, written just now
        f".notes.txt.tmp-{dead}",  # not an export file
        f"g.pt2.tmp-{dead}",  # not atomic_write's name
        f".g.pt2.tmp-{dead}x",
    ]
    for name in [*stale, *kept]:
        (tmp_path / name).write_bytes(b"partial")
    old = time.time() - 2 * 3600
    os.utime(tmp_path / stale[2], (old, old))
    result = _export(mlp()[0], tmp_path / "g.pt2")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["g.pt2", *kept])  # before: every partial file stayed
    assert any("removed 3 temporary file(s) of earlier interrupted exports" in n
               for n in result.notes)  # fmt: skip


def test_a_fresh_temporary_of_a_live_pid_is_left_alone(tmp_path):
    name = f".g.pt2.tmp-{os.getppid()}"  # e.g. another export, writing in this folder now
    (tmp_path / name).write_bytes(b"being written")
    _export(mlp()[0], tmp_path / "g.pt2")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "g.pt2"])


def test_a_full_disk_names_the_export_file_and_leaves_nothing(disk):  # noqa: F811
    fill(disk)
    target = disk / "g.pt2"
    with pytest.raises(StorageError) as caught:
        _export(mlp()[0], target)
    message = str(caught.value)
    assert f"writing the export file {target} (" in message and "the disk is full" in message
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.ENOSPC
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]

"""Bad command lines and unusable files: one line on stderr and exit code 2, never a traceback,
and nothing written (fault list of issue 10, items 8, 14 and 15)."""

from __future__ import annotations

import os

import pytest
from faults import TINY, cli, error_line


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    (root / "a_file").write_text("x")
    (root / "latin1").write_bytes(
        '{"step": 1, "scale": 1.0, "note": "caf\xe9"}\n'.encode("latin-1")
    )
    (root / "folder").mkdir()
    os.mkfifo(root / "fifo")
    return root


CASES = [
    # ampkit train
    (["train", *TINY, "--seed", str(2**70)], "--seed must be an integer from"),
    (["train", *TINY, "--device", "cuda"], "device: 'cuda' was requested, but"),
    (["train", *TINY, "--device", "meta"], "device: 'meta' tensors hold no data"),
    (["train", *TINY, "--out", "{a_file}/run"], "--out: cannot create the folder"),
    (["train", *TINY, "--out", "{a_file}"], "'--out': Directory '{a_file}' is a file"),
    (["train", *TINY, "--data", "{folder}"], "--data: {folder} is not a file"),
    (["train", *TINY, "--data", "{fifo}"], "--data: {fifo} is not a file"),
    (["train", *TINY, "--n-head", "0"], "--n-head must be an integer >= 1"),
    (["train", *TINY, "--out", "{tmp}/x", "--checkpoint-every", "0"], "--checkpoint-every must"),
    (["train", *TINY, "--out", "{tmp}/x", "--keep-last", "-1"], "--keep-last must be"),
    (
        ["train", *TINY, "--overwrite", "--resume", "auto", "--out", "{tmp}/x"],
        "--overwrite (replace",
    ),
    (["train", *TINY, "--resume", "auto"], "need --out DIR"),
    (["train", *TINY, "--out", "{tmp}/x", "--resume", "{a_file}"], "--resume: {a_file} is not a"),
    (["train", *TINY, "--precision", "bf61"], "--precision: unknown precision 'bf61'"),
    (["train", *TINY, "--keep-fp32", "bogus"], "--keep-fp32: 'bogus' is not a module"),
    (["train", *TINY, "--nproc", "2", "--steps", "0"], "--steps must be an integer >= 1"),
    (["train", *TINY, "--nproc", "2", "--data", "{tmp}/missing.txt"], "does not exist"),
    # ampkit doctor
    (["doctor", "--metrics", "{latin1}"], "is not UTF-8 text"),
    (["doctor", "--json", "{folder}"], "'--json': File '{folder}' is a directory"),
    (["doctor", "--html", "{a_file}/r.html"], "--html: cannot write"),
    (["doctor", "--model", "json:loads"], "--model: json:loads is not a model factory"),
    (["doctor", "--model", "torch.nn:Linear"], "--model: torch.nn:Linear is not a model factory"),
    (["doctor", "--seed", str(2**70)], "--seed: "),
    # ampkit bench
    (["bench", "--json", "{folder}"], "'--json': File '{folder}' is a directory"),
    (["bench", "--plot", "{a_file}/p.png"], "--plot: cannot write"),
    (["bench", "--model", "json:loads"], "--model: json:loads is not a model factory"),
    (["bench", "--steps", "2"], "--steps must be an integer >= 3"),
]


@pytest.mark.parametrize(
    ("args", "needle"), CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CASES]
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(files, args, needle):
    names = {p.name: str(p) for p in files.iterdir()} | {"tmp": str(files)}
    before = sorted(p.name for p in files.iterdir())
    result = cli(*(a.format(**names) for a in args))
    assert result.code == 2, result
    line = error_line(result)
    assert needle.format(**names) in line
    assert "checkpoint_dir" not in line and "resume=" not in line  # flags, not API names
    assert sorted(p.name for p in files.iterdir()) == before

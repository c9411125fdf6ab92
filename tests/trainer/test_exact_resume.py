"""Resume keeps every optimizer-state tensor in the dtype and with the bits it was saved in
(fp32 parameters with bf16 moments; bf16-true's fp32 state, Kahan residuals and fp32 islands;
bf16-true with bf16-kahan state), and the continued run is bitwise the uninterrupted one: the
full layout in one process here, the sharded layout and a 1 -> 2 reshard under FSDP2 with 2
gloo processes (exact_state_worker.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from exact_state_worker import BATCH, CASES, fit
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("exact_state_worker.py")


def state(out: Path, run: str, when: str, rank: int = 0) -> dict[str, torch.Tensor]:
    return torch.load(out / f"{run}-{when}-rank{rank}.pt", weights_only=True)


def assert_bitwise(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key, x in a.items():
        y = b[key]
        assert x.dtype == y.dtype, f"{key}: {x.dtype} vs {y.dtype}"
        assert torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)), key


def assert_same_weights(out: Path, a: str, b: str) -> None:
    left, right = load_file(out / f"{a}.safetensors"), load_file(out / f"{b}.safetensors")
    assert left.keys() == right.keys()
    for name, tensor in left.items():
        assert torch.equal(tensor, right[name]), name


@pytest.mark.parametrize("case", list(CASES))
def test_full_layout_resume_is_dtype_and_bit_exact(tmp_path, case):
    fit(tmp_path, case, "straight", 2 * BATCH, layout="full")
    step2 = tmp_path / f"{case}-straight" / "ckpt" / "step-00000002"
    fit(tmp_path, case, "resumed", 2 * BATCH, layout="full", resume=step2)
    saved = state(tmp_path, f"{case}-straight", "step2")
    assert {t.dtype for t in saved.values()} != {torch.float32}  # a mixed-dtype state
    assert_bitwise(state(tmp_path, f"{case}-resumed", "start"), saved)
    assert_bitwise(
        state(tmp_path, f"{case}-resumed", "end"), state(tmp_path, f"{case}-straight", "end")
    )
    assert_same_weights(tmp_path, f"{case}-resumed", f"{case}-straight")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exact")
    one = tmp_path_factory.mktemp("one")
    for case in CASES:  # 1-process sharded checkpoints, for the reshard
        fit(one, case, "one", 2 * BATCH, layout="sharded")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(WORKER), str(out), str(one)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-4000:]
    (out / "one").symlink_to(one)
    return out


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", list(CASES))
def test_sharded_resume_is_dtype_and_bit_exact_on_every_rank(runs, case):
    for rank in (0, 1):
        saved = state(runs, f"{case}-straight", "step2", rank)
        assert_bitwise(state(runs, f"{case}-resumed", "start", rank), saved)
        assert_bitwise(
            state(runs, f"{case}-resumed", "end", rank),
            state(runs, f"{case}-straight", "end", rank),
        )
    assert_same_weights(runs, f"{case}-resumed", f"{case}-straight")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", list(CASES))
def test_resharded_resume_keeps_the_saved_dtypes_and_bits(runs, case):
    """A 1-process checkpoint loaded by 2 processes: each rank holds its half of every saved
    state tensor, in the saved dtype, with the saved bits."""
    saved = state(runs / "one", f"{case}-one", "step2")
    halves = [state(runs, f"{case}-from-one", "start", rank) for rank in (0, 1)]
    assert halves[0].keys() == saved.keys()
    joined = {
        key: value if value.dim() == 0 else torch.cat([halves[0][key], halves[1][key]])
        for key, value in halves[0].items()
    }
    assert_bitwise(joined, saved)

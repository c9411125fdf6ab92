"""--out after earlier runs, damaged checkpoints, changed settings and a diverging loss
(issue 10 items 6, 9, 12, 13 and the checkpoint corruptions): one line, the exit code, and
exactly the files the messages promise."""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import pytest
from faults import TINY, cli, error_line, metric_steps
from safetensors.torch import load_file


def digest(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    result = cli("train", *TINY, "--out", str(out), "--checkpoint-every", "2")
    assert result.code == 0, result
    return out


@pytest.fixture
def run_dir(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def test_a_fresh_run_into_an_earlier_run_is_refused_and_changes_nothing(run_dir):
    before = digest(run_dir)
    result = cli("train", *TINY, "--out", str(run_dir))
    assert result.code == 2
    line = error_line(result)
    assert "holds an earlier run (metrics.jsonl, summary.json, model.safetensors" in line
    assert "--resume auto" in line and "--overwrite" in line
    assert digest(run_dir) == before


def test_overwrite_starts_over(run_dir):
    result = cli("train", *TINY, "--steps", "2", "--out", str(run_dir), "--overwrite")
    assert result.code == 0, result
    assert metric_steps(run_dir) == [1, 2] and not (run_dir / "checkpoints").exists()


def test_resume_with_another_seed_is_refused_and_a_new_lr_is_applied(run_dir):
    before = digest(run_dir)
    refused = cli("train", *TINY, "--out", str(run_dir), "--resume", "auto", "--seed", "1")
    assert refused.code == 2
    assert "--seed 0 (now 1)" in error_line(refused)
    assert digest(run_dir) == before
    resumed = cli(
        "train", *TINY, "--out", str(run_dir), "--resume", "auto", "--steps", "6", "--lr", "1e-3"
    )
    assert resumed.code == 0, resumed
    assert "--lr 0.001 replaces the 0.002" in resumed.stdout
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[4]["lr"] == pytest.approx(1e-3 * 6 / 20)  # step 5 of a 20-step warm-up


def test_every_checkpoint_damaged_says_how_to_start_over(run_dir):
    for checkpoint in (run_dir / "checkpoints").iterdir():
        state = checkpoint / "state.pt"
        state.write_bytes(state.read_bytes()[:-7])  # truncated
    before = digest(run_dir)
    result = cli("train", *TINY, "--out", str(run_dir), "--resume", "auto", "--steps", "6")
    assert result.code == 1
    line = error_line(result)
    assert "holds no valid checkpoint (2 damaged" in line
    assert "--overwrite instead of --resume" in line
    assert digest(run_dir) == before


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(run_dir):
    weights = run_dir / "checkpoints" / "step-00000004" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # one bit
    weights.write_bytes(bytes(data))
    result = cli("train", *TINY, "--out", str(run_dir), "--resume", "auto", "--steps", "5")
    assert result.code == 0, result
    assert "skipped a bad checkpoint" in result.stdout and "step-00000004" in result.stdout
    assert "resumed from" in result.stdout and "step-00000002 at step 2" in result.stdout
    assert metric_steps(run_dir) == [1, 2, 3, 4, 5]


def test_a_diverging_run_stops_nonzero_without_nan_weights(tmp_path):
    out = tmp_path / "nan"
    args = ["--lr", "1e6", "--max-grad-norm", "0", "--checkpoint-every", "1", "--steps", "6"]
    result = cli("train", *TINY, *args, "--out", str(out))
    assert result.code == 1
    line = error_line(result)
    assert "training loss became non-finite (nan) at step" in line
    assert not (out / "model.safetensors").exists() and not (out / "summary.json").exists()
    checkpoints = sorted((out / "checkpoints").iterdir())
    assert checkpoints  # the finite ones before the divergence
    for checkpoint in checkpoints:
        weights = load_file(checkpoint / "model.safetensors")
        assert all(math.isfinite(float(t.abs().max())) for t in weights.values()), checkpoint
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] is None and all(r["loss"] is not None for r in rows[:-1])

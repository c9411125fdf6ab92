"""``ampkit train`` end to end, in-process, and its bad-input paths."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from ampkit.cli import main

SMALL = [
    "--steps",
    "6",
    "--batch-size",
    "4",
    "--seq-len",
    "32",
    "--log-every",
    "2",
    "--no-progress",
]


def invoke(*args: str):
    return CliRunner().invoke(main, ["train", *args], catch_exceptions=False)


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """A run without --out writes a fresh runs/ folder in the current folder: here, tmp_path."""
    monkeypatch.chdir(tmp_path)


def test_a_run_without_out_is_kept_in_a_fresh_run_folder_and_the_summary_says_where(tmp_path):
    result = invoke(*SMALL, "--steps", "2", "--n-layer", "1", "--n-embd", "32")
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.endswith("-gpt")
    assert (folder / "model.safetensors").is_file() and (folder / "summary.json").is_file()
    assert f"runs/{folder.name}/metrics.jsonl" in result.output


def test_fresh_run_folder_never_names_an_existing_folder(tmp_path):
    from ampkit.cli.train_cmd import fresh_run_folder

    first = fresh_run_folder("hf:gpt2:tiny", root=str(tmp_path))
    assert first.endswith("-hf-gpt2-tiny")
    (tmp_path / first).mkdir()
    second = fresh_run_folder("hf:gpt2:tiny", root=str(tmp_path))
    assert second == first + "-2"


def test_model_flag_trains_a_hugging_face_model_on_a_text_file(tmp_path):
    pytest.importorskip("transformers")
    data = tmp_path / "corpus.txt"
    data.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    result = invoke(*SMALL, "--steps", "2", "--seq-len", "16", "--model", "hf:gpt2:tiny",
                    "--data", str(data), "--out", str(tmp_path / "r"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "bytes modulo the 512-token vocabulary" in result.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["config"]["model"] == "hf:gpt2:tiny" and summary["steps"] == 2


def test_train_writes_metrics_weights_and_summary(tmp_path):
    out = tmp_path / "run"
    result = invoke(*SMALL, "--precision", "fp32", "--out", str(out))
    assert result.exit_code == 0, result.output
    for label in ("precision", "why", "steps", "final loss", "throughput", "peak memory"):
        assert label in result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6]
    assert set(rows[0]) == {
        "step",
        "loss",
        "lr",
        "scale",
        "skipped",
        "grad_norm",
        "step_time_ms",
        "samples_per_s",
        "tokens_per_s",
    }
    assert all(math.isfinite(r["loss"]) and r["tokens_per_s"] > 0 for r in rows)
    weights = load_file(out / "model.safetensors")
    assert weights and all(t.dtype == torch.float32 for t in weights.values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["precision"] == "fp32"


def test_loss_goes_down():
    from ampkit import TrainConfig, train

    summary_rows = []
    train(
        TrainConfig(
            precision="fp32", device="cpu", steps=40, batch_size=8, seq_len=32, log_every=5
        ),
        callbacks=[summary_rows.append],
    )
    assert summary_rows[0].loss > summary_rows[-1].loss + 1.0  # from ~ln(256)=5.5


def test_same_seed_gives_bitwise_identical_weights(tmp_path):
    for name in ("a", "b"):
        assert invoke(*SMALL, "--precision", "fp32", "--out", str(tmp_path / name)).exit_code == 0
    a, b = (load_file(tmp_path / n / "model.safetensors") for n in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")
def test_fp16_run_reports_loss_scale(tmp_path):
    result = invoke(
        *SMALL, "--precision", "fp16-mixed", "--grad-accum", "2", "--out", str(tmp_path)
    )
    assert result.exit_code == 0, result.output
    assert "loss scale" in result.output and "fp16" in result.output
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["scale"] == 2.0**16


def test_bf16_and_no_clipping(tmp_path):
    result = invoke(*SMALL, "--precision", "bf16", "--max-grad-norm", "0", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["grad_norm"] is None


def test_own_data_file(tmp_path):
    data = tmp_path / "poem.txt"
    data.write_text("the quick brown fox jumps over the lazy dog\n" * 50)
    result = invoke(*SMALL, "--precision", "fp32", "--data", str(data))
    assert result.exit_code == 0, result.output
    assert str(data) in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--precision", "bf61"], "Did you mean 'bf16'?"),
        (["--steps", "0"], "--steps must be an integer >= 1"),
        (["--grad-accum", "0"], "--grad-accum must be an integer >= 1"),
        (["--lr", "-1"], "--lr must be a positive number"),
        (["--data", "/nonexistent/file.txt"], "does not exist"),
        (["--device", "tpu:0:0"], "device"),
        (["--precision", "fp8"], "pass emulate=True for tests, or use bf16"),
        (["--update-compensation", "kahan"], "--update-compensation applies to --precision bf16"),
        (
            ["--precision", "bf16", "--state-precision", "bf16-stochastic"],
            "--state-precision applies to --precision bf16-true only, got --precision bf16",
        ),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(args, needle):
    result = CliRunner().invoke(main, ["train", *SMALL, *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("ampkit: error:")]
    assert len(error_lines) == 1


@pytest.mark.parametrize(("content", "needle"), [(b"", "empty"), (b"\x00\x01\x02" * 10, "binary")])
def test_empty_or_binary_data_is_refused(tmp_path, content, needle):
    data = tmp_path / "data.bin"
    data.write_bytes(content)
    result = CliRunner().invoke(main, ["train", *SMALL, "--data", str(data)])
    assert result.exit_code == 2 and needle in result.output


def test_batch_too_large_for_the_data(tmp_path):
    data = tmp_path / "short.txt"
    data.write_text("only a hundred bytes of text " * 4)
    result = CliRunner().invoke(main, ["train", *SMALL, "--batch-size", "128", "--data", str(data)])
    assert result.exit_code == 2
    assert "--batch-size: a batch of 128 sequences" in result.output


def test_several_bad_settings_are_reported_together():
    result = CliRunner().invoke(main, ["train", "--steps", "-1", "--log-every", "0"])
    assert result.exit_code == 2
    assert "--steps" in result.output and "--log-every" in result.output


@pytest.mark.parametrize("command", [[], ["train"], ["formats"]])
def test_help_carries_an_example(command):
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0 and "Examples:" in result.output


#: The subprocess limit of the default-run tests; their pytest-timeout is above it, so the
#: subprocess's own timeout (with its stderr) is what fires on a slow machine, not pytest's.
_DEFAULT_RUN_TIMEOUT_S = 600


def _run_console_script(cwd, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ampkit", "train", "--no-progress", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=_DEFAULT_RUN_TIMEOUT_S,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(_DEFAULT_RUN_TIMEOUT_S + 60)
def test_console_script_with_no_arguments_trains_the_builtin_model(tmp_path):
    result = _run_console_script(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "300 (0 skipped)" in result.stdout
    final_loss = float(result.stdout.split("final loss")[1].split()[0])
    assert final_loss < 2.6


@pytest.mark.timeout(_DEFAULT_RUN_TIMEOUT_S + 60)
def test_console_script_default_run_for_20_steps_learns(tmp_path):
    """The default run's fast variant: same model, data and precision, 20 steps."""
    result = _run_console_script(tmp_path, "--steps", "20")
    assert result.returncode == 0, result.stderr
    assert "20 (0 skipped)" in result.stdout
    final_loss = float(result.stdout.split("final loss")[1].split()[0])
    assert final_loss < math.log(256)  # below a uniform guess over the 256 byte values


def test_bf16_true_run_trains_in_bf16(tmp_path):
    result = invoke(*SMALL, "--precision", "bf16-true", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "bf16-true on cpu" in result.output
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(row["lost_updates"] is not None for row in rows)
    last = f"{rows[-1]['lost_updates']:.2%} of the last logged step's updates rounded away"
    assert f"updates  bf16 weights, Kahan-compensated; {last}" in result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["update_compensation"] == "kahan"
    assert summary["lost_updates"] == rows[-1]["lost_updates"]


def test_bf16_true_state_precision_is_named_in_the_summary_and_fixed_on_resume(tmp_path):
    out = tmp_path / "run"
    tiny = [*SMALL, "--n-layer", "1", "--n-embd", "32", "--precision", "bf16-true", "--out"]
    args = ["--state-precision", "bf16-stochastic", "--steps", "3", "--checkpoint-every", "3"]
    result = invoke(*tiny, str(out), *args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["state_precision"] == "bf16-stochastic"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert summary["lost_state_updates"] == rows[-1]["lost_state_updates"]
    lost = f"{rows[-1]['lost_state_updates']:.2%} of the last logged step's state updates"
    line = "state  optimizer state in bf16, stochastic rounding (bf16-stochastic); " + lost
    assert line in result.output

    # the state's dtype is in the checkpoint: a resume in another state precision is refused
    again = ["--state-precision", "fp32", "--steps", "6", "--resume", "auto"]
    refused = CliRunner().invoke(main, ["train", *tiny, str(out), *again])
    assert refused.exit_code == 2
    (error,) = [x for x in refused.stderr.splitlines() if x.strip()]
    assert "--state-precision bf16-stochastic (now fp32)" in error


def test_bf16_true_default_state_is_fp32_in_the_summary(tmp_path):
    result = invoke(*SMALL, "--steps", "2", "--n-layer", "1", "--n-embd", "32",
                    "--precision", "bf16-true", "--out", str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "state  optimizer state in fp32\n" in result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["state_precision"], summary["lost_state_updates"]) == ("fp32", 0.0)


@pytest.mark.filterwarnings("default::ampkit.errors.PrecisionWarning")
def test_precision_warning_is_one_line_without_a_python_location():
    result = CliRunner().invoke(main, ["train", *SMALL, "--steps", "1", "--precision", "fp16"])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "PrecisionWarning" in line
              or line.startswith("ampkit: warning:")]  # fmt: skip
    assert len(warned) == 1 and warned[0].startswith("ampkit: warning: precision 'fp16' on the CPU")
    assert ".py:" not in result.stderr


@pytest.mark.filterwarnings("ignore::ampkit.errors.PrecisionWarning")  # fp16 on a CPU is slow
def test_resume_into_another_precision_needs_the_flag_and_is_recorded(tmp_path):
    out = tmp_path / "run"
    tiny = [*SMALL, "--n-layer", "1", "--n-embd", "32", "--checkpoint-every", "2", "--out"]
    first = invoke(*tiny, str(out), "--precision", "fp16", "--steps", "4")
    assert first.exit_code == 0, first.output
    listing = sorted(p.name for p in (out / "checkpoints").iterdir())

    refused = CliRunner().invoke(
        main, ["train", *tiny, str(out), "--precision", "fp32", "--resume", "auto"]
    )
    assert refused.exit_code == 2
    (line,) = [x for x in refused.stderr.splitlines() if x.strip()]
    assert "--precision fp16 (now fp32)" in line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == listing  # nothing written

    args = ["--precision", "fp32", "--resume", "auto", "--allow-precision-change"]
    resumed = invoke(*tiny, str(out), *args)
    assert resumed.exit_code == 0, resumed.output
    assert "--allow-precision-change: resuming the fp16 checkpoint in fp32" in resumed.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # the first step after the change gets a row of its own that records it
    assert [r["step"] for r in rows] == [2, 4, 5, 6]
    assert [r.get("precision_change") for r in rows] == [None, None, "fp16 -> fp32", None]


def test_warmup_steps_and_weight_decay_are_flags_that_reach_the_run(tmp_path):
    """--warmup-steps N: the first logged learning rate is lr * 1/N (the scheduler's linear
    warm-up after one step); --weight-decay is recorded in the run's settings."""
    result = invoke(*SMALL, "--steps", "2", "--log-every", "1", "--lr", "0.004",
                    "--warmup-steps", "4", "--weight-decay", "0.05", "--out", str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["lr"] == pytest.approx(0.004 * 2 / 4)  # after one step: (done + 1) / warmup
    recorded = json.loads((tmp_path / "summary.json").read_text())["config"]
    assert (recorded["warmup_steps"], recorded["weight_decay"]) == (4, 0.05)
    refused = invoke(*SMALL, "--warmup-steps", "-1")
    assert refused.exit_code == 2 and "--warmup-steps must be an integer >= 0" in refused.output

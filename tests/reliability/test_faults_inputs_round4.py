"""Round 4 (issue 38), inputs and observers: a model option that asks for 100M layers or a zero
vocabulary, a tracker whose folder is deleted mid-run, a batch of no samples, and ``ampkit
export`` inputs that must exit 2 (items 6, 7, 11, 14, 16)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from faults import cli, error_line
from torch import nn

from ampkit import Trainer
from ampkit.errors import DataError
from ampkit.trainer import LoggingConfig
from ampkit.trainer.callbacks import Callback, TensorBoard
from ampkit.trainer.loggers import WandbLogger


def _fit(*callbacks: Callback, data=None, steps: int = 4) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    if data is None:
        data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 2))
    Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.functional.mse_loss,
        max_steps=steps,
        precision="fp32",
        device="cpu",
        batch_size=None if isinstance(data, list) else 4,
        callbacks=list(callbacks),
        logging=LoggingConfig(log_every=1, progress_bar=False),
    ).fit(data)


# -- items 6 and 11: model options bounded before anything is built ------------------------------


@pytest.mark.timeout(120)
def test_an_override_asking_for_100m_layers_is_refused_before_building():
    pytest.importorskip("transformers")
    result = cli("doctor", "--model", "hf:gpt2:tiny,n_layer=100000000", "--no-progress")
    assert result.code == 2
    line = error_line(result)
    assert "about 4.92e+12 parameters in 100000000 layers" in line and "--allow-large" in line


def test_the_size_estimate_is_that_of_the_built_model_and_allow_large_lets_it_pass():
    transformers = pytest.importorskip("transformers")
    from ampkit.models.resolve import build_model
    from ampkit.models.size import check_size, estimate_parameters

    built = build_model("hf:gpt2:tiny,n_layer=3", batch_size=2)
    params = sum(p.numel() for p in built.model.parameters())
    default = transformers.AutoConfig.for_model("gpt2")
    estimate, layers = estimate_parameters(default, built.config.to_dict())
    assert layers == 3 and abs(estimate - params) / params < 0.02, (estimate, params)
    check_size("hf:gpt2", default, {"n_layer": 10**8}, allow_large=True)  # no estimate refuses


def test_a_zero_vocabulary_is_one_line_exit_2():
    pytest.importorskip("transformers")
    result = cli("doctor", "--model", "hf:gpt2:tiny,vocab_size=0", "--no-progress")
    assert result.code == 2
    assert "vocab_size=0 is invalid" in error_line(result)


# -- item 7: a tracker that fails warns once, training goes on ------------------------------------


class _RemoveAt(Callback):
    """Deletes a folder right after the logged step 2 (``rm -rf`` by someone else)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_log(self, trainer, metrics):
        if metrics.step == 2:
            shutil.rmtree(self.folder)


def test_tensorboard_folder_deleted_mid_run_warns_once_and_training_goes_on(tmp_path):
    pytest.importorskip("tensorboard")
    logs = tmp_path / "tensorboard"
    logger = TensorBoard(logs)
    with pytest.warns(RuntimeWarning, match="TensorBoard: ") as seen:
        _fit(_RemoveAt(logs), logger)
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert logger.failed is not None


@pytest.mark.slow
def test_wandb_folder_deleted_mid_run_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)  # wandb's finish of a run whose folder is gone writes ./wandb
    logger = WandbLogger(project="tests", dir=tmp_path / "wb")
    with pytest.warns(RuntimeWarning, match="WandbLogger: logging step 2 failed") as seen:
        _fit(_RemoveAt(tmp_path / "wb" / "wandb"), logger)
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert "no longer exists" in str(logger.failed)


# -- item 14: a batch of no samples --------------------------------------------------------------


def test_a_batch_of_zero_samples_is_a_data_error_not_a_divergence():
    empty = [(torch.empty(0, 4), torch.empty(0, 2))] * 4
    with pytest.raises(DataError, match=r"a batch of 0 samples .*shape \(0, 4\)") as err:
        _fit(data=empty)
    assert "learning rate" not in str(err.value)


# -- item 16: export's input errors exit 2 as documented ------------------------------------------


def test_export_of_missing_or_non_safetensors_weights_exits_2(tmp_path):
    out = str(tmp_path / "m.onnx")
    missing = cli("export", "--checkpoint", str(tmp_path / "nope"), "--out", out, "--no-progress")
    assert missing.code == 2 and "does not exist" in error_line(missing)
    text = tmp_path / "notes.txt"
    text.write_text("not weights")
    wrong = cli("export", "--checkpoint", str(text), "--out", out, "--no-progress")
    assert wrong.code == 2 and "not a readable safetensors file" in error_line(wrong)


# -- item 15: a signal outside the training loop says so -----------------------------------------


_SLOW_FACTORY = """
import pathlib, time
import torch


def make():
    pathlib.Path("building").write_text("")  # the command is running: the signal may come
    time.sleep(120)
    return torch.nn.Linear(2, 2), lambda: torch.zeros((), requires_grad=True)
"""


@pytest.mark.timeout(200)
def test_sigterm_before_training_starts_is_one_line_and_the_signal_exit_status(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "slowmodel.py").write_text(_SLOW_FACTORY)
    child = subprocess.Popen(
        [sys.executable, "-m", "ampkit", "doctor", "--model", "slowmodel:make", "--no-progress"],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 150
    while not (tmp_path / "building").exists():
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM  # as without a handler: exit status 143
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ampkit: error: stopped by SIGTERM"), stderr


# -- item 13: a stop on a signal under --nproc is not "rank 1 failed first" ------------------------


def test_ranks_stopped_together_by_sigterm_name_no_rank_as_failed_first(tmp_path):
    """Rank 0 got SIGTERM; both ranks stopped at the same step and wrote the checkpoint; rank
    1 exited first (143) and the agent's SIGTERM ended rank 0 while it finished: torchrun's
    records as the launcher reads them."""
    import json
    import signal

    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from ampkit.cli.torchrun import _exit_status

    def failure(rank: int, exitcode: int, at: int) -> ProcessFailure:
        error_file = tmp_path / f"error-{rank}.json"
        error_file.write_text(json.dumps({"message": f"rank {rank}", "timestamp": at}))
        return ProcessFailure(
            local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file=str(error_file)
        )

    stopped = {0: failure(0, -signal.SIGTERM, 101), 1: failure(1, 128 + signal.SIGTERM, 100)}
    assert _exit_status(stopped) == (128 + signal.SIGTERM, None)  # rank 0's stop line speaks
    # a rank that really failed is still named
    failed = {0: failure(0, -signal.SIGTERM, 101), 1: failure(1, 3, 100)}
    status, line = _exit_status(failed)
    assert status == 3 and line is not None and "rank 1 (PID 1001) failed first" in line

"""MLflowLogger and WandbLogger on ampkit.Trainer: the rows of metrics.jsonl, read back with
MLflow's client and from W&B's offline run file; a failing tracker warns once and training
goes on."""

from __future__ import annotations

import json
import math
import shutil
import struct
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from ampkit import Trainer
from ampkit.errors import MissingDependencyError
from ampkit.trainer import LoggingConfig
from ampkit.trainer.callbacks import Callback
from ampkit.trainer.loggers import MLflowLogger, WandbLogger

STEPS = 6


def dataset(n: int = 64) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(n, 12, generator=g), torch.randint(0, 3, (n,), generator=g)
    )


def logging_options(metrics_file: Path) -> dict:
    """Log every 2 steps to ``metrics_file``, no bar."""
    return dict(logging=LoggingConfig(log_every=2, metrics_file=metrics_file, progress_bar=False))


def fit(tmp_path: Path, *callbacks: Callback, **kwargs) -> list[dict]:
    """Train a small MLP on the CPU; return the rows of its metrics.jsonl."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.Linear(16, 3))
    options = dict(
        loss_fn=nn.functional.cross_entropy,
        max_steps=STEPS,
        precision="fp32",
        device="cpu",
        batch_size=8,
        max_grad_norm=1.0,
        callbacks=list(callbacks),
        **logging_options(tmp_path / "metrics.jsonl"),
    )
    options.update(kwargs)
    Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-2), **options).fit(dataset())
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def numeric(row: dict) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in row.items()
        if k != "step" and v is not None and not isinstance(v, str)
    }


# -- MLflow ------------------------------------------------------------------------------


@pytest.mark.slow
def test_mlflow_run_holds_the_metrics_file_rows(tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="pip install 'ampkit[mlflow]'")
    store = tmp_path / "mlruns"
    logger = MLflowLogger(store, experiment="tests", run_name="mlp")
    rows = fit(tmp_path, logger)
    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "mlp"
    assert run.data.params["max_steps"] == str(STEPS)
    assert run.data.tags["precision"] == "fp32"
    assert set(run.data.metrics) == set(numeric(rows[0]))
    for key in run.data.metrics:
        history = client.get_metric_history(logger.run_id, key)
        assert [(m.step, m.value) for m in history] == [
            (row["step"], numeric(row)[key]) for row in rows
        ], key
    assert logger.failed is None


@pytest.mark.slow
def test_mlflow_store_that_cannot_be_written_warns_once_and_training_goes_on(tmp_path):
    pytest.importorskip("mlflow", reason="pip install 'ampkit[mlflow]'")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store should be")
    logger = MLflowLogger(blocker / "mlruns")
    with pytest.warns(RuntimeWarning, match="MLflowLogger: starting the MLflow run failed") as seen:
        rows = fit(tmp_path, logger)
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert [r["step"] for r in rows] == [2, 4, 6]  # the run went on
    assert logger.failed is not None


class BreakStore(Callback):
    """Replaces the MLflow store with a file after the first logged step: a disk gone bad."""

    def __init__(self, store: Path) -> None:
        self.store = store

    def on_log(self, trainer, metrics):
        if metrics.step == 2:
            shutil.rmtree(self.store)
            self.store.write_text("gone")


@pytest.mark.slow
def test_mlflow_failing_mid_run_warns_once(tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="pip install 'ampkit[mlflow]'")
    store = tmp_path / "mlruns"
    logger = MLflowLogger(store)
    with pytest.warns(RuntimeWarning, match="logging step 2 failed") as seen:
        rows = fit(tmp_path, BreakStore(store), logger)  # the logger runs right after the break
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert [r["step"] for r in rows] == [2, 4, 6]
    assert mlflow is not None


# -- Weights & Biases --------------------------------------------------------------------


def wandb_records(path: Path):
    """The records of a W&B run file: its LevelDB-style log (32 KiB blocks, 7-byte record
    headers: crc32, length, type), each record a protobuf ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        payload, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        if kind in (1, 2):  # FULL, FIRST
            pending = payload
        else:  # MIDDLE, LAST
            pending += payload
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


@pytest.mark.slow
def test_wandb_offline_run_holds_the_metrics_file_rows(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="pip install 'ampkit[wandb]'")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(project="tests", dir=tmp_path / "wb", name="mlp")
    rows = fit(tmp_path, logger)
    assert logger.failed is None
    (run_file,) = (tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb")
    history, config = [], {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind in ("run", "config"):
            update = record.run.config.update if kind == "run" else record.config.update
            config.update({item_key(i): json.loads(i.value_json) for i in update})
    assert [h["_step"] for h in history] == [r["step"] for r in rows]
    for logged, row in zip(history, rows, strict=True):
        sent = {k: v for k, v in logged.items() if not k.startswith("_")}
        assert sent.keys() == numeric(row).keys()
        for key, value in numeric(row).items():
            assert math.isclose(sent[key], value, rel_tol=0, abs_tol=0), key
    assert config["precision"] == "fp32" and config["max_steps"] == STEPS, config


def test_missing_package_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[wandb\]'") as err:
        fit(tmp_path, WandbLogger(dir=tmp_path))
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_wandb_that_cannot_start_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="pip install 'ampkit[wandb]'")
    monkeypatch.setenv("WANDB_SILENT", "true")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where W&B should write")
    logger = WandbLogger(dir=blocker / "wb")
    with pytest.warns(RuntimeWarning, match="WandbLogger: starting the W&B run failed") as seen:
        rows = fit(tmp_path, logger)
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert [r["step"] for r in rows] == [2, 4, 6]

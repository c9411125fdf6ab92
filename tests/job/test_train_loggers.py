"""``ampkit train --logger``: the logged steps reach MLflow and W&B besides metrics.jsonl."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ampkit.cli import main
from ampkit.job.config import TrainConfig

SMALL = ["--steps", "4", "--log-every", "2", "--batch-size", "4", "--seq-len", "16",
         "--precision", "fp32", "--no-progress"]  # fmt: skip


def _rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_mlflow_logger_gets_the_rows_of_metrics_jsonl(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="pip install 'ampkit[mlflow]'")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", *SMALL, "--out", str(out), "--logger", "mlflow"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.tracking.MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "ampkit"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(r["step"], r["loss"]) for r in _rows(out)]


def test_an_unknown_or_missing_logger_is_one_line(tmp_path, monkeypatch):
    result = CliRunner().invoke(main, ["train", *SMALL, "--logger", "neptune"])
    assert result.exit_code == 2 and "'neptune' is not one of" in result.output
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    result = CliRunner().invoke(
        main, ["train", *SMALL, "--out", str(tmp_path / "r"), "--logger", "wandb"]
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "--logger: wandb was asked for, but the wandb package is not installed" in result.output


def test_loggers_are_validated_and_free_on_resume():
    with pytest.raises(Exception, match="loggers"):
        TrainConfig(loggers=("neptune",)).validate()
    TrainConfig(loggers=("mlflow", "wandb")).validate()
    from ampkit.job.resume import FREE

    assert "loggers" in FREE

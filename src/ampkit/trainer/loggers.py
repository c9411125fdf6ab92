"""Experiment trackers for :class:`ampkit.Trainer`: MLflow and Weights & Biases.

Both are :class:`~ampkit.callbacks.Callback` subclasses that send each logged step with the keys
of ``metrics.jsonl`` (``loss``, ``lr``, ``scale``, ``skipped``, ``grad_norm``,
``step_time_ms``, ``samples_per_s``, and ``tokens_per_s``, ``eval_loss``, the precision mode's metrics
and each eval metric as ``eval_<name>`` when set), at ``step`` = the optimizer step, from rank 0 only::

    from ampkit.trainer.loggers import MLflowLogger, WandbLogger

    trainer = ampkit.Trainer(model, optimizer, max_steps=1000, callbacks=[
        MLflowLogger("runs/mlflow"),              # a local MLflow file store: no server
        WandbLogger(project="gpt", mode="offline"),
    ])

A tracker is an observer: when it fails (server down, disk full, a bad key) it warns once
(``RuntimeWarning``, naming the tracker and the error), stops sending, and the training run
goes on. Its library is imported when the run starts; a missing one is a one-line
:class:`~ampkit.errors.MissingDependencyError` naming the pip extra.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampkit.errors import ConfigurationError, MissingDependencyError
from ampkit.trainer.callbacks import Tracker as _Tracker

if TYPE_CHECKING:
    from ampkit.trainer.callbacks import TrainerView
    from ampkit.trainer.metrics import StepMetrics
    from ampkit.trainer.result import FitResult

__all__ = ["MLflowLogger", "WandbLogger", "metric_values"]


def metric_values(metrics: StepMetrics) -> dict[str, float]:
    """The numeric keys of a ``metrics.jsonl`` row (``skipped`` as 0/1), without ``step``.

    Unset optional values (None) are left out; eval metrics are ``eval_<name>`` as in the
    file; inf/NaN are kept (a tracker shows them, where the JSON line writes null).
    """
    values: dict[str, float] = {}
    for key, value in metrics.flat().items():
        if key != "step" and isinstance(value, (int, float)):  # bool too: skipped as 0/1
            values[key] = float(value)
    return values


def _import(module: str, feature: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature}: needs the {module!r} package, which cannot be imported here ({exc}). "
            f"Install it: pip install 'ampkit[{extra}]'."
        ) from None


class MLflowLogger(_Tracker):
    """Send the logged steps to an MLflow run.

    Args:
        tracking_uri: a folder for a local MLflow file store (no server; MLflow 3 accepts one
            only with ``MLFLOW_ALLOW_FILE_STORE=true``, which the logger sets while it opens
            the store, unless you set it), or any MLflow tracking URI (``http://...``,
            ``sqlite:///...``); None uses MLflow's own setting (``MLFLOW_TRACKING_URI``).
        experiment: the experiment's name (created if missing).
        run_name: the run's name; None lets MLflow choose one.
        run_id: log into this existing run instead of creating one (a resumed training run).
        tags: run tags.

    Attributes:
        run_id: the MLflow run's id, once the run has started.
        failed: the first error of the tracker (None while it works).
    """

    name = "MLflowLogger"

    def __init__(
        self,
        tracking_uri: str | Path | None = None,
        *,
        experiment: str = "ampkit",
        run_name: str | None = None,
        run_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(experiment, str) or not experiment:
            raise ConfigurationError(
                f"MLflowLogger: experiment={experiment!r} is invalid. Give the experiment's name."
            )
        self.tracking_uri = _mlflow_uri(tracking_uri)
        self.experiment = experiment
        self.run_name = run_name
        self.run_id = run_id
        self.tags = dict(tags or {})
        self._client: Any = None
        self._entities: Any = None

    def on_fit_start(self, trainer: TrainerView) -> None:
        if not trainer.is_main:
            return
        mlflow = _import("mlflow", "MLflowLogger", "mlflow")
        self._entities = _import("mlflow.entities", "MLflowLogger", "mlflow")

        def start() -> None:
            with _file_store_allowed(self.tracking_uri):
                client = mlflow.tracking.MlflowClient(tracking_uri=self.tracking_uri)
                if self.run_id is None:
                    found = client.get_experiment_by_name(self.experiment)
                    experiment_id = (
                        found.experiment_id
                        if found is not None
                        else client.create_experiment(self.experiment)
                    )
                    tags = {**self.tags, "precision": trainer.mp.policy.precision}
                    if trainer.resumed_from is not None:
                        tags["resumed_from"] = str(trainer.resumed_from)
                    run = client.create_run(experiment_id, run_name=self.run_name, tags=tags)
                    self.run_id = run.info.run_id
                    client.log_param(self.run_id, "precision", trainer.mp.policy.describe())
                    client.log_param(self.run_id, "max_steps", trainer.max_steps)
                else:
                    client.update_run(self.run_id, status="RUNNING")
            self._client = client
            self._active = True

        self._send("starting the MLflow run", start)

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        if not self._active:
            return
        metric = self._entities.Metric
        stamp = _now_ms()
        batch = [
            metric(key, value, stamp, metrics.step) for key, value in metric_values(metrics).items()
        ]
        client, run_id = self._client, self.run_id

        def send() -> None:
            client.log_batch(run_id, metrics=batch)
            if metrics.precision_change is not None:
                client.set_tag(run_id, "precision_change", metrics.precision_change)

        self._send(f"logging step {metrics.step}", send)

    def on_fit_end(self, trainer: TrainerView, result: FitResult) -> None:
        self._finish("FINISHED")

    def on_exception(self, trainer: TrainerView, error: BaseException) -> None:
        self._finish("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")

    def close(self) -> None:
        self._finish("FINISHED")

    def _finish(self, status: str) -> None:
        if self._active:
            self._active = False
            client, run_id = self._client, self.run_id
            self._send("ending the MLflow run", lambda: client.set_terminated(run_id, status))


class WandbLogger(_Tracker):
    """Send the logged steps to a Weights & Biases run.

    Args:
        project: the W&B project.
        mode: ``"offline"`` (default: the run is written under ``dir`` and uploaded later with
            ``wandb sync``), ``"online"`` or ``"disabled"``.
        dir: where W&B writes its files (``<dir>/wandb/...``); None: the working directory.
        name: the run's display name.
        id: the run's id; with ``resume="allow"`` a resumed training run continues it.
        config: the run's config (the precision is added).
        **init_kwargs: more ``wandb.init`` arguments.

    Attributes:
        run: the ``wandb`` run, once started.
        failed: the first error of the tracker (None while it works).
    """

    name = "WandbLogger"

    def __init__(
        self,
        project: str = "ampkit",
        *,
        mode: str = "offline",
        dir: str | Path | None = None,
        name: str | None = None,
        id: str | None = None,
        config: Mapping[str, Any] | None = None,
        **init_kwargs: Any,
    ) -> None:
        super().__init__()
        if mode not in ("offline", "online", "disabled"):
            raise ConfigurationError(
                f"WandbLogger: mode={mode!r} is invalid. Use 'offline', 'online' or 'disabled'."
            )
        self.project, self.mode, self.dir = project, mode, None if dir is None else Path(dir)
        self.run_name, self.id = name, id
        self.config = dict(config or {})
        self.init_kwargs = init_kwargs
        self.run: Any = None

    def on_fit_start(self, trainer: TrainerView) -> None:
        if not trainer.is_main:
            return
        wandb = _import("wandb", "WandbLogger", "wandb")

        def start() -> None:
            if self.dir is not None:
                self.dir.mkdir(parents=True, exist_ok=True)
            config = {
                **self.config,
                "precision": trainer.mp.policy.precision,
                "max_steps": trainer.max_steps,
            }
            self.run = wandb.init(
                project=self.project,
                mode=self.mode,
                dir=None if self.dir is None else str(self.dir),
                name=self.run_name,
                id=self.id,
                config=config,
                **self.init_kwargs,
            )
            self._active = True

        self._send("starting the W&B run", start)

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        if not self._active:
            return
        row: dict[str, Any] = dict(metric_values(metrics))
        if metrics.precision_change is not None:
            row["precision_change"] = metrics.precision_change
        run = self.run

        def send() -> None:
            run.log(row, step=metrics.step)
            # wandb writes from a service process and tells the run nothing when its folder
            # goes away: look for it, so a deleted folder warns as an error would
            folder = getattr(run, "dir", None)
            if folder and not Path(folder).is_dir():
                raise FileNotFoundError(f"the run's folder {folder} no longer exists")

        self._send(f"logging step {metrics.step}", send)

    def on_fit_end(self, trainer: TrainerView, result: FitResult) -> None:
        self._finish(0)

    def on_exception(self, trainer: TrainerView, error: BaseException) -> None:
        self._finish(1)

    def close(self) -> None:
        self._finish(0)

    def _finish(self, exit_code: int) -> None:
        run, self.run = self.run, None
        if run is None:
            return
        self._active = False
        if self.failed is None:
            self._send("finishing the W&B run", lambda: run.finish(exit_code=exit_code))
        else:  # it failed and warned once: still end the run, or the next wandb.init reuses it
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)


def _mlflow_uri(uri: str | Path | None) -> str | None:
    """A folder becomes a ``file:`` URI (absolute); URIs pass through."""
    if uri is None:
        return None
    text = str(uri)
    if isinstance(uri, Path) or "://" not in text and not text.startswith("file:"):
        return Path(text).expanduser().resolve().as_uri()
    return text


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


@contextlib.contextmanager
def _file_store_allowed(uri: str | None) -> Iterator[None]:
    """MLflow 3 opens a file store only with ``MLFLOW_ALLOW_FILE_STORE=true``: set it while
    the store is opened (MLflow keeps the opened store), unless the user set it."""
    key = "MLFLOW_ALLOW_FILE_STORE"
    if uri is None or not uri.startswith("file:") or key in os.environ:
        yield
        return
    os.environ[key] = "true"
    try:
        yield
    finally:
        os.environ.pop(key, None)

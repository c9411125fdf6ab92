"""ampkit's Trainer inside Ray Train: checkpoints reported to Ray, and a restarted worker
resuming from the checkpoint Ray restores.

``ray.train.torch.TorchTrainer`` starts the workers and their process group; ampkit's Trainer
runs in each one unchanged (it uses the group Ray made). Two pieces connect the two::

    from ampkit.integrations.ray import RayReport, resume_from_ray

    def train_func(config):
        trainer = ampkit.Trainer(
            model, optimizer, max_steps=1000, batch_size=32,
            checkpoint=ampkit.CheckpointConfig(
                "/shared/run/ckpt", every=100, resume=resume_from_ray("/shared/run/ckpt")
            ),
            callbacks=[RayReport()],
        )
        trainer.fit(dataset)

    TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(failure_config=FailureConfig(max_failures=3))).fit()

* :class:`RayReport` reports every checkpoint the Trainer commits with
  ``ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(step_folder))``
  (rank 0 attaches the checkpoint, the other ranks report the same number of times, as Ray
  requires). Ray copies the folder into its storage under the same ``step-NNNNNNNN`` name.
* :func:`resume_from_ray` is what ``CheckpointConfig(resume=...)`` gets: the checkpoint Ray
  restored after a failure (``ray.train.get_checkpoint()``), or ``"auto"`` when the Trainer's
  own folder holds one at least as new (a checkpoint written but not yet reported).

When a report happens: a checkpoint written at step N is reported at the end of step N + 1
(or at the end of ``fit``), once every rank has it committed; Ray's restore is therefore at
most one checkpoint behind the Trainer's folder, which :func:`resume_from_ray` prefers. The
checkpoint folder must be shared storage when the workers are on several machines, as for any
multi-node ampkit run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampkit.checkpoint import folder
from ampkit.integrations._deps import require
from ampkit.trainer.callbacks import Callback, TrainerView

if TYPE_CHECKING:
    from ampkit.precision.engine import StepResult
    from ampkit.trainer.metrics import StepMetrics
    from ampkit.trainer.result import FitResult

__all__ = ["RayReport", "resume_from_ray"]


def _ray_train() -> Any:
    return require("ray.train", feature="ampkit.integrations.ray", extra="ray")


class RayReport(Callback):
    """Report each checkpoint the Trainer commits to Ray Train (``ray.train.report``).

    Every rank calls ``ray.train.report`` at the same steps (Ray's report is a barrier across
    the workers); rank 0 attaches the checkpoint folder, the others None. The metrics are the
    last logged row's ``step`` and ``loss`` (rank 0's), plus ``checkpoint_step``.

    Args:
        metrics: extra fixed metrics to report with each checkpoint (JSON-ready).

    Raises:
        MissingDependencyError: Ray Train is not installed (``pip install 'ampkit[ray]'``),
            when the callback is made.
    """

    def __init__(self, metrics: dict[str, Any] | None = None) -> None:
        self._train = _ray_train()
        self._extra = dict(metrics or {})
        self._due: int | None = None  # the checkpoint step that is reported next
        self._committed: list[Path] = []  # rank 0: committed, not yet reported
        self._last: dict[str, Any] = {}

    def on_fit_start(self, trainer: TrainerView) -> None:
        self._due, self._committed, self._last = None, [], {}

    def on_log(self, trainer: TrainerView, metrics: StepMetrics) -> None:
        self._last = {"step": metrics.step, "loss": metrics.loss}

    def on_checkpoint(self, trainer: TrainerView, path: Path) -> None:
        self._committed.append(Path(path))

    def on_step_end(self, trainer: TrainerView, result: StepResult) -> None:
        # the checkpoint of the previous step (if it had one) is committed on every rank now
        if self._due is not None:
            self._report(trainer, self._due)
        every = getattr(trainer, "checkpoint_every", None)
        step = trainer.step
        self._due = step if every and step % every == 0 and step < trainer.max_steps else None

    def on_fit_end(self, trainer: TrainerView, result: FitResult) -> None:
        self._report(trainer, trainer.step)

    def _report(self, trainer: TrainerView, step: int) -> None:
        self._due = None
        checkpoint, name = None, None
        if trainer.is_main and self._committed:
            path = self._committed[-1]
            self._committed = []
            checkpoint = self._train.Checkpoint.from_directory(str(path))
            name = path.name
        metrics = {**self._extra, **self._last, "checkpoint_step": step}
        self._train.report(
            metrics,
            checkpoint=checkpoint,
            checkpoint_dir_name=name,
            delete_local_checkpoint_after_upload=False,
        )


def resume_from_ray(checkpoint_dir: str | Path) -> str | None:
    """What ``CheckpointConfig(resume=...)`` should be in a Ray Train worker.

    Returns:
        ``"auto"`` when ``checkpoint_dir`` holds a valid checkpoint at least as new as the
        one Ray restored (or Ray restored none but the folder holds one); the local path of
        Ray's checkpoint (downloaded into a temporary folder when Ray's storage is not a
        local path) when it is newer; None when there is nothing to resume (a fresh run).

    Raises:
        MissingDependencyError: Ray Train is not installed.
    """
    train = _ray_train()
    restored = train.get_checkpoint()
    local, _ = folder.latest_valid_checkpoint(checkpoint_dir)
    if restored is None:
        return "auto" if local is not None else None
    path = Path(restored.path)
    if not path.is_dir():  # remote storage: bring it here, under its step-N name
        target = Path(tempfile.mkdtemp(prefix="ampkit-ray-")) / path.name
        restored.to_directory(str(target))
        path = target
    ray_step = folder.verify_checkpoint(path)["step"]
    if local is not None and local.step >= ray_step:
        return "auto"
    return str(path)

"""ampkit where users already train: the Hugging Face Trainer, Lightning, Accelerate and Ray.

Each integration is a submodule that imports its library only when it is imported itself, so
``import ampkit.integrations`` needs none of them:

* :mod:`ampkit.integrations.transformers`: ``AmpkitCallback`` for ``transformers.Trainer``
  (skipped steps, loss scale, lost updates, the module behind the first inf/NaN).
* :mod:`ampkit.integrations.lightning`: ``AmpkitPrecision``, a Lightning precision plugin
  running ampkit's policy and loss scaler, and ``AmpkitCallback`` logging its telemetry.
* :mod:`ampkit.integrations.accelerate`: ``scaler_stats``, the loss-scale telemetry of an
  ``accelerate.Accelerator``.
* :mod:`ampkit.integrations.ray`: ``RayReport``, a Trainer callback reporting each committed
  checkpoint to Ray Train, and ``resume_from_ray``, the checkpoint a restarted Ray worker
  resumes from.

A missing library is a one-line :class:`~ampkit.errors.MissingDependencyError` naming the pip
extra to install.
"""

from __future__ import annotations

__all__: list[str] = []

#: The telemetry keys every integration logs (the Hugging Face Trainer, Lightning's loggers).
SKIPPED_STEPS = "ampkit/skipped_steps"
LOSS_SCALE = "ampkit/loss_scale"
LOST_UPDATES = "ampkit/lost_updates"
NONFINITE_STEP = "ampkit/nonfinite_step"
NONFINITE_MODULE = "ampkit/nonfinite_module"
DOCTOR_PRECISION = "ampkit/doctor_precision"

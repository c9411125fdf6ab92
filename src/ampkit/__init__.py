"""ampkit: mixed-precision training for PyTorch that is correct, fast and easy to debug.

Importing ampkit changes no global torch setting; :class:`MixedPrecision` used as a context
manager (or :func:`precision_session`) applies the policy's settings and restores them.

The public names below are imported on first use, so ``import ampkit`` (and ``ampkit lint``,
which never needs torch) starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ampkit.callbacks import Callback as Callback
    from ampkit.engine import MixedPrecision as MixedPrecision
    from ampkit.engine import StepResult as StepResult
    from ampkit.errors import AmpkitError as AmpkitError
    from ampkit.errors import CheckpointError as CheckpointError
    from ampkit.errors import ConfigurationError as ConfigurationError
    from ampkit.errors import DataError as DataError
    from ampkit.errors import NonFiniteTrainingError as NonFiniteTrainingError
    from ampkit.errors import PrecisionWarning as PrecisionWarning
    from ampkit.errors import ScalerStateError as ScalerStateError
    from ampkit.errors import UnsupportedPrecisionError as UnsupportedPrecisionError
    from ampkit.formats import NumberFormat as NumberFormat
    from ampkit.formats import number_format as number_format
    from ampkit.formats import number_formats as number_formats
    from ampkit.inference import predict as predict
    from ampkit.policy import Policy as Policy
    from ampkit.policy import precision_session as precision_session
    from ampkit.policy import resolve_precision as resolve_precision
    from ampkit.scaler import LossScaler as LossScaler
    from ampkit.scaler import ScalerStats as ScalerStats
    from ampkit.trainer import FitResult as FitResult
    from ampkit.trainer import Trainer as Trainer
    from ampkit.training import TrainConfig as TrainConfig
    from ampkit.training import TrainSummary as TrainSummary
    from ampkit.training import train as train

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Callback": "ampkit.callbacks",
    "MixedPrecision": "ampkit.engine",
    "StepResult": "ampkit.engine",
    "AmpkitError": "ampkit.errors",
    "CheckpointError": "ampkit.errors",
    "ConfigurationError": "ampkit.errors",
    "DataError": "ampkit.errors",
    "NonFiniteTrainingError": "ampkit.errors",
    "PrecisionWarning": "ampkit.errors",
    "ScalerStateError": "ampkit.errors",
    "UnsupportedPrecisionError": "ampkit.errors",
    "NumberFormat": "ampkit.formats",
    "number_format": "ampkit.formats",
    "number_formats": "ampkit.formats",
    "predict": "ampkit.inference",
    "Policy": "ampkit.policy",
    "precision_session": "ampkit.policy",
    "resolve_precision": "ampkit.policy",
    "LossScaler": "ampkit.scaler",
    "ScalerStats": "ampkit.scaler",
    "FitResult": "ampkit.trainer",
    "Trainer": "ampkit.trainer",
    "TrainConfig": "ampkit.training",
    "TrainSummary": "ampkit.training",
    "train": "ampkit.training",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ampkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "AmpkitError",
    "Callback",
    "CheckpointError",
    "ConfigurationError",
    "DataError",
    "FitResult",
    "LossScaler",
    "MixedPrecision",
    "NonFiniteTrainingError",
    "NumberFormat",
    "Policy",
    "PrecisionWarning",
    "ScalerStateError",
    "ScalerStats",
    "StepResult",
    "TrainConfig",
    "Trainer",
    "TrainSummary",
    "UnsupportedPrecisionError",
    "number_format",
    "number_formats",
    "precision_session",
    "predict",
    "resolve_precision",
    "train",
]

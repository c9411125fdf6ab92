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
    from ampkit._tree import to_device as to_device
    from ampkit.deploy import ExportResult as ExportResult
    from ampkit.deploy import export as export
    from ampkit.divergence import CompareReport as CompareReport
    from ampkit.divergence import compare as compare
    from ampkit.doctor import NonFiniteProbe as NonFiniteProbe
    from ampkit.doctor import NumericsFinding as NumericsFinding
    from ampkit.doctor import NumericsReport as NumericsReport
    from ampkit.doctor import Recommendation as Recommendation
    from ampkit.doctor import Tolerances as Tolerances
    from ampkit.doctor import detect_nonfinite as detect_nonfinite
    from ampkit.doctor import diagnose as diagnose
    from ampkit.doctor import precision_map as precision_map
    from ampkit.errors import AmpkitError as AmpkitError
    from ampkit.errors import CheckpointError as CheckpointError
    from ampkit.errors import ConfigurationError as ConfigurationError
    from ampkit.errors import DataError as DataError
    from ampkit.errors import ExportError as ExportError
    from ampkit.errors import KeywordError as KeywordError
    from ampkit.errors import NonFiniteError as NonFiniteError
    from ampkit.errors import NonFiniteTrainingError as NonFiniteTrainingError
    from ampkit.errors import NonFiniteWeightsError as NonFiniteWeightsError
    from ampkit.errors import ParityError as ParityError
    from ampkit.errors import PrecisionWarning as PrecisionWarning
    from ampkit.errors import RanksDisagreeError as RanksDisagreeError
    from ampkit.errors import RunInUseError as RunInUseError
    from ampkit.errors import ScalerStateError as ScalerStateError
    from ampkit.errors import StorageError as StorageError
    from ampkit.errors import TrainingInterrupted as TrainingInterrupted
    from ampkit.errors import UnsupportedPrecisionError as UnsupportedPrecisionError
    from ampkit.job.config import TrainConfig as TrainConfig
    from ampkit.job.job import TrainSummary as TrainSummary
    from ampkit.job.job import train as train
    from ampkit.precision.bf16_true import CompensatedOptimizer as CompensatedOptimizer
    from ampkit.precision.bf16_true import lost_update_fraction as lost_update_fraction
    from ampkit.precision.contract import DtypeContract as DtypeContract
    from ampkit.precision.contract import check_dtype_contract as check_dtype_contract
    from ampkit.precision.contract import dtype_contract as dtype_contract
    from ampkit.precision.engine import MixedPrecision as MixedPrecision
    from ampkit.precision.engine import StepResult as StepResult
    from ampkit.precision.float_formats import NumberFormat as NumberFormat
    from ampkit.precision.float_formats import number_format as number_format
    from ampkit.precision.float_formats import number_formats as number_formats
    from ampkit.precision.fp8 import Fp8Plan as Fp8Plan
    from ampkit.precision.fp8 import fp8_plan as fp8_plan
    from ampkit.precision.fp32_modules import Fp32Islands as Fp32Islands
    from ampkit.precision.fp32_modules import keep_fp32 as keep_fp32
    from ampkit.precision.inference import predict as predict
    from ampkit.precision.modes import Bf16True as Bf16True
    from ampkit.precision.modes import Fp8 as Fp8
    from ampkit.precision.modes import Fp32 as Fp32
    from ampkit.precision.modes import Mixed as Mixed
    from ampkit.precision.modes import PrecisionMode as PrecisionMode
    from ampkit.precision.policy import Policy as Policy
    from ampkit.precision.policy import parse_precision as parse_precision
    from ampkit.precision.policy import precision_session as precision_session
    from ampkit.precision.policy import resolve_precision as resolve_precision
    from ampkit.precision.scaler import LossScaler as LossScaler
    from ampkit.precision.scaler import ScalerStats as ScalerStats
    from ampkit.runs import RunReport as RunReport
    from ampkit.runs import report as report
    from ampkit.trainer import Callback as Callback
    from ampkit.trainer import CheckpointConfig as CheckpointConfig
    from ampkit.trainer import CompileConfig as CompileConfig
    from ampkit.trainer import DistributedConfig as DistributedConfig
    from ampkit.trainer import EvalConfig as EvalConfig
    from ampkit.trainer import EvalResult as EvalResult
    from ampkit.trainer import FitResult as FitResult
    from ampkit.trainer import LoggingConfig as LoggingConfig
    from ampkit.trainer import Trainer as Trainer
    from ampkit.trainer import accuracy as accuracy

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "CompensatedOptimizer": "ampkit.precision.bf16_true",
    "lost_update_fraction": "ampkit.precision.bf16_true",
    "Fp8Plan": "ampkit.precision.fp8",
    "fp8_plan": "ampkit.precision.fp8",
    "Callback": "ampkit.trainer",
    "NumericsFinding": "ampkit.doctor",
    "ExportResult": "ampkit.deploy",
    "export": "ampkit.deploy",
    "NonFiniteProbe": "ampkit.doctor",
    "NumericsReport": "ampkit.doctor",
    "Recommendation": "ampkit.doctor",
    "Tolerances": "ampkit.doctor",
    "detect_nonfinite": "ampkit.doctor",
    "diagnose": "ampkit.doctor",
    "precision_map": "ampkit.doctor",
    "DtypeContract": "ampkit.precision.contract",
    "check_dtype_contract": "ampkit.precision.contract",
    "dtype_contract": "ampkit.precision.contract",
    "MixedPrecision": "ampkit.precision.engine",
    "StepResult": "ampkit.precision.engine",
    "AmpkitError": "ampkit.errors",
    "CheckpointError": "ampkit.errors",
    "ConfigurationError": "ampkit.errors",
    "DataError": "ampkit.errors",
    "ExportError": "ampkit.errors",
    "KeywordError": "ampkit.errors",
    "NonFiniteError": "ampkit.errors",
    "NonFiniteTrainingError": "ampkit.errors",
    "NonFiniteWeightsError": "ampkit.errors",
    "ParityError": "ampkit.errors",
    "PrecisionWarning": "ampkit.errors",
    "RanksDisagreeError": "ampkit.errors",
    "RunInUseError": "ampkit.errors",
    "ScalerStateError": "ampkit.errors",
    "StorageError": "ampkit.errors",
    "TrainingInterrupted": "ampkit.errors",
    "UnsupportedPrecisionError": "ampkit.errors",
    "NumberFormat": "ampkit.precision.float_formats",
    "number_format": "ampkit.precision.float_formats",
    "number_formats": "ampkit.precision.float_formats",
    "predict": "ampkit.precision.inference",
    "Fp32Islands": "ampkit.precision.fp32_modules",
    "keep_fp32": "ampkit.precision.fp32_modules",
    "Bf16True": "ampkit.precision.modes",
    "Fp8": "ampkit.precision.modes",
    "Fp32": "ampkit.precision.modes",
    "Mixed": "ampkit.precision.modes",
    "PrecisionMode": "ampkit.precision.modes",
    "parse_precision": "ampkit.precision.policy",
    "Policy": "ampkit.precision.policy",
    "precision_session": "ampkit.precision.policy",
    "resolve_precision": "ampkit.precision.policy",
    "LossScaler": "ampkit.precision.scaler",
    "ScalerStats": "ampkit.precision.scaler",
    "FitResult": "ampkit.trainer",
    "Trainer": "ampkit.trainer",
    "CheckpointConfig": "ampkit.trainer",
    "CompileConfig": "ampkit.trainer",
    "DistributedConfig": "ampkit.trainer",
    "EvalConfig": "ampkit.trainer",
    "EvalResult": "ampkit.trainer",
    "accuracy": "ampkit.trainer",
    "LoggingConfig": "ampkit.trainer",
    "TrainConfig": "ampkit.job.config",
    "TrainSummary": "ampkit.job.job",
    "train": "ampkit.job.job",
    "to_device": "ampkit._tree",
    "CompareReport": "ampkit.divergence",
    "compare": "ampkit.divergence",
    "RunReport": "ampkit.runs",
    "report": "ampkit.runs",
}


#: Modules of public names that import no torch (everything else needs it installed).
_TORCH_FREE = frozenset({"ampkit.errors", "ampkit.job.config", "ampkit.runs"})


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ampkit' has no attribute {name!r}")
    if module not in _TORCH_FREE:
        from ampkit._torch import require_torch

        require_torch(f"ampkit.{name}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "AmpkitError",
    "Bf16True",
    "Callback",
    "CheckpointConfig",
    "CheckpointError",
    "CompareReport",
    "CompensatedOptimizer",
    "CompileConfig",
    "ConfigurationError",
    "DataError",
    "DistributedConfig",
    "DtypeContract",
    "EvalConfig",
    "EvalResult",
    "ExportError",
    "ExportResult",
    "FitResult",
    "Fp32",
    "Fp32Islands",
    "Fp8",
    "Fp8Plan",
    "KeywordError",
    "LoggingConfig",
    "LossScaler",
    "Mixed",
    "MixedPrecision",
    "NonFiniteError",
    "NonFiniteProbe",
    "NonFiniteTrainingError",
    "NonFiniteWeightsError",
    "NumericsFinding",
    "NumberFormat",
    "NumericsReport",
    "ParityError",
    "Policy",
    "PrecisionMode",
    "PrecisionWarning",
    "RanksDisagreeError",
    "Recommendation",
    "RunInUseError",
    "RunReport",
    "ScalerStateError",
    "ScalerStats",
    "StepResult",
    "StorageError",
    "Tolerances",
    "TrainConfig",
    "TrainSummary",
    "Trainer",
    "TrainingInterrupted",
    "UnsupportedPrecisionError",
    "accuracy",
    "check_dtype_contract",
    "compare",
    "detect_nonfinite",
    "diagnose",
    "dtype_contract",
    "export",
    "fp8_plan",
    "keep_fp32",
    "lost_update_fraction",
    "number_format",
    "number_formats",
    "parse_precision",
    "precision_map",
    "precision_session",
    "predict",
    "report",
    "resolve_precision",
    "to_device",
    "train",
]

"""ampkit: mixed-precision training for PyTorch that is correct, fast and easy to debug.

Importing ampkit changes no global torch setting; :class:`MixedPrecision` used as a context
manager (or :func:`precision_session`) applies the policy's settings and restores them.
"""

from ampkit.doctor import Finding as Finding
from ampkit.doctor import NonFiniteProbe as NonFiniteProbe
from ampkit.doctor import NumericsReport as NumericsReport
from ampkit.doctor import Recommendation as Recommendation
from ampkit.doctor import Tolerances as Tolerances
from ampkit.doctor import detect_nonfinite as detect_nonfinite
from ampkit.doctor import diagnose as diagnose
from ampkit.doctor import precision_map as precision_map
from ampkit.engine import MixedPrecision as MixedPrecision
from ampkit.engine import StepResult as StepResult
from ampkit.errors import AmpkitError as AmpkitError
from ampkit.errors import CheckpointError as CheckpointError
from ampkit.errors import ConfigurationError as ConfigurationError
from ampkit.errors import DataError as DataError
from ampkit.errors import NonFiniteError as NonFiniteError
from ampkit.errors import NonFiniteTrainingError as NonFiniteTrainingError
from ampkit.errors import PrecisionWarning as PrecisionWarning
from ampkit.errors import ScalerStateError as ScalerStateError
from ampkit.errors import UnsupportedPrecisionError as UnsupportedPrecisionError
from ampkit.formats import NumberFormat as NumberFormat
from ampkit.formats import number_format as number_format
from ampkit.formats import number_formats as number_formats
from ampkit.keep_fp32 import Fp32Islands as Fp32Islands
from ampkit.keep_fp32 import keep_fp32 as keep_fp32
from ampkit.policy import Policy as Policy
from ampkit.policy import precision_session as precision_session
from ampkit.policy import resolve_precision as resolve_precision
from ampkit.scaler import LossScaler as LossScaler
from ampkit.scaler import ScalerStats as ScalerStats
from ampkit.training import TrainConfig as TrainConfig
from ampkit.training import TrainSummary as TrainSummary
from ampkit.training import train as train

__version__ = "0.1.0"

__all__ = [
    "AmpkitError",
    "CheckpointError",
    "ConfigurationError",
    "DataError",
    "Finding",
    "Fp32Islands",
    "LossScaler",
    "MixedPrecision",
    "NonFiniteError",
    "NonFiniteProbe",
    "NonFiniteTrainingError",
    "NumberFormat",
    "NumericsReport",
    "Policy",
    "PrecisionWarning",
    "Recommendation",
    "ScalerStateError",
    "ScalerStats",
    "StepResult",
    "Tolerances",
    "TrainConfig",
    "TrainSummary",
    "UnsupportedPrecisionError",
    "detect_nonfinite",
    "diagnose",
    "keep_fp32",
    "number_format",
    "number_formats",
    "precision_map",
    "precision_session",
    "resolve_precision",
    "train",
]

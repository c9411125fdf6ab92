"""The numerics doctor: where low precision breaks a model, and what to do about it.

* :func:`diagnose`: per-module ranges against fp16/bf16/fp8, findings and a recommendation.
* :func:`detect_nonfinite`: a cheap probe naming the module that made the first inf/NaN.
* :func:`precision_map`: the dtype autocast gave each module.
* :func:`probe_lost_updates`: the weight updates pure bf16 (bf16-true) would round away.
"""

from ampkit.doctor.diagnosis import diagnose as diagnose
from ampkit.doctor.dtype_map import precision_map as precision_map
from ampkit.doctor.findings import Tolerances as Tolerances
from ampkit.doctor.nonfinite import NonFiniteProbe as NonFiniteProbe
from ampkit.doctor.nonfinite import detect_nonfinite as detect_nonfinite
from ampkit.doctor.report import NumericsReport as NumericsReport
from ampkit.doctor.rows import MapRow as MapRow
from ampkit.doctor.rows import ModuleRow as ModuleRow
from ampkit.doctor.rows import NumericsFinding as NumericsFinding
from ampkit.doctor.rows import PhaseRow as PhaseRow
from ampkit.doctor.rows import Recommendation as Recommendation
from ampkit.precision.bf16_true.probe import LostUpdatesReport as LostUpdatesReport
from ampkit.precision.bf16_true.probe import probe_lost_updates as probe_lost_updates

__all__ = [
    "LostUpdatesReport",
    "NumericsFinding",
    "MapRow",
    "ModuleRow",
    "NonFiniteProbe",
    "NumericsReport",
    "PhaseRow",
    "Recommendation",
    "Tolerances",
    "detect_nonfinite",
    "diagnose",
    "precision_map",
    "probe_lost_updates",
]

"""``ampkit bench``: measured answers to "how much faster and smaller is mixed precision here".

:func:`run_bench` trains the built-in GPT, a small conv net or your model in each precision,
interleaved step by step, and returns a :class:`BenchReport` (table, JSON, plot, verdict).
The parts are usable alone: :mod:`~ampkit.bench.timing` (interleaved runner, drift probe,
paired-ratio medians), :mod:`~ampkit.bench.memory` (bytes saved for backward, CUDA peaks),
:mod:`~ampkit.bench.flops` (model FLOPs, MFU) and :mod:`~ampkit.bench.workloads`.

Importing this package changes no global state.
"""

from ampkit.bench.report import BenchReport as BenchReport
from ampkit.bench.report import VariantResult as VariantResult
from ampkit.bench.report import Verdict as Verdict
from ampkit.bench.report import decide_verdict as decide_verdict
from ampkit.bench.report import save_plot as save_plot
from ampkit.bench.run import default_precisions as default_precisions
from ampkit.bench.run import run_bench as run_bench
from ampkit.bench.timing import Timings as Timings
from ampkit.bench.timing import run_interleaved as run_interleaved
from ampkit.bench.workloads import Workload as Workload

__all__ = [
    "BenchReport",
    "Timings",
    "VariantResult",
    "Verdict",
    "Workload",
    "decide_verdict",
    "default_precisions",
    "run_bench",
    "run_interleaved",
    "save_plot",
]

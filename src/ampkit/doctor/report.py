"""What the doctor found: findings, per-module rows, the recommendation, and their renderings.

:class:`NumericsReport` is what :func:`ampkit.diagnose` returns. ``to_json()`` gives strict JSON
(non-finite numbers become ``null``), ``to_text()`` the terminal tables, ``to_html(path)`` a
self-contained page with plots (needs matplotlib, a dependency of ampkit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ampkit.doctor.stats import HIST_MIN_EXPONENT, Fit

__all__ = [
    "Finding",
    "FindingKind",
    "MapRow",
    "ModuleRow",
    "NumericsReport",
    "Phase",
    "PhaseRow",
    "Recommendation",
]

FindingKind = Literal["overflow", "underflow", "precision-loss", "non-finite"]
Phase = Literal["forward", "backward"]


@dataclass(frozen=True)
class Finding:
    """One numerics problem, tied to the module where it starts.

    Attributes:
        module: the module's name as in ``model.named_modules()`` (``""`` is the model itself).
        kind: ``overflow``, ``underflow``, ``precision-loss`` or ``non-finite``.
        phase: ``forward`` (activations) or ``backward`` (gradients).
        precision: the format the problem happens in (``fp16``, ``bf16``; ``fp32`` for inf/NaN
            that the fp32 run itself produced).
        message: one line for people.
        numbers: the measurements behind it (fractions, magnitudes, limits, loss scale).
        module_type: the module's class name.
        step: 1-based step (forward pass) where it was seen, when known.
        dtype: dtype of the offending tensor, when known.
        input_ranges: ``(min, max)`` of each floating input of the offending call, when known.
    """

    module: str
    kind: FindingKind
    phase: Phase
    precision: str
    message: str
    numbers: Mapping[str, float] = field(default_factory=dict)
    module_type: str = ""
    step: int | None = None
    dtype: str | None = None
    input_ranges: tuple[tuple[float, float], ...] = ()

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (non-finite numbers become None)."""
        return _clean(asdict(self))


@dataclass(frozen=True)
class Recommendation:
    """How to train this model, from what the doctor measured.

    Attributes:
        precision: ``fp16``, ``bf16`` or ``fp32``: the lowest precision the numbers allow.
        init_scale: initial loss scale for fp16 (the scale dynamic scaling settles on for these
            gradients); None for bf16/fp32.
        keep_fp32: module names to run in fp32 (apply with :func:`ampkit.keep_fp32`).
        reasons: one sentence per decision.
        hardware: what ``resolve_precision("auto")`` picks on this machine, and why (whether
            mixed precision is faster here at all).
    """

    precision: str
    init_scale: float | None
    keep_fp32: tuple[str, ...]
    reasons: tuple[str, ...]
    hardware: str = ""

    def snippet(self) -> str:
        """Python that applies this recommendation with :class:`ampkit.MixedPrecision`."""
        lines = []
        if self.keep_fp32:
            lines.append(f"islands = ampkit.keep_fp32(model, {list(self.keep_fp32)!r})")
        scale = f", init_scale={self.init_scale:g}" if self.init_scale is not None else ""
        lines.append(f'with ampkit.MixedPrecision("{self.precision}"{scale}) as mp: ...')
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return _clean(asdict(self))


@dataclass(frozen=True)
class PhaseRow:
    """One module's activations (forward) or gradients (backward), measured in fp32.

    Attributes:
        count, zeros, nonfinite: values seen, exact zeros, inf/NaN.
        max_abs, min_abs: largest and smallest non-zero finite magnitude.
        fits: per format, how the values would fare (:class:`~ampkit.doctor.stats.Fit`).
        hist: ``floor(log2|x|)`` histogram; bin ``i`` is exponent ``HIST_MIN_EXPONENT + i``.
    """

    count: int
    zeros: int
    nonfinite: int
    max_abs: float
    min_abs: float
    fits: Mapping[str, Fit]
    hist: Sequence[int]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values; the histogram as ``{exponent: count}`` for non-empty bins."""
        data = asdict(self)
        data["hist"] = {str(HIST_MIN_EXPONENT + i): c for i, c in enumerate(self.hist) if c}
        return _clean(data)


@dataclass(frozen=True)
class ModuleRow:
    """Everything measured for one module.

    Attributes:
        name, type: as in ``named_modules()`` and the class name.
        calls: forward calls seen over all steps.
        forward, backward: activation and gradient statistics (None if never seen).
        rel_error: per candidate format, the largest relative error (L2) of the module's
            output when re-run under autocast in that format from the same fp32 inputs.
    """

    name: str
    type: str
    calls: int
    forward: PhaseRow | None
    backward: PhaseRow | None
    rel_error: Mapping[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "name": self.name,
            "type": self.type,
            "calls": self.calls,
            "forward": self.forward.to_dict() if self.forward else None,
            "backward": self.backward.to_dict() if self.backward else None,
            "rel_error": _clean(dict(self.rel_error)),
        }


@dataclass(frozen=True)
class MapRow:
    """Where autocast put one module: the dtypes it actually saw and produced.

    Attributes:
        module, type: name and class name.
        inputs: dtypes of its floating inputs; output: dtype of its (first) floating output.
        params: dtypes of its own parameters.
        finite: whether all its floating outputs were finite.
    """

    module: str
    type: str
    inputs: tuple[str, ...]
    output: str | None
    params: tuple[str, ...]
    finite: bool


@dataclass(frozen=True)
class NumericsReport:
    """The result of :func:`ampkit.diagnose`.

    Attributes:
        precision: the candidate precision that was diagnosed.
        device: where it ran.
        steps: fp32 steps measured.
        loss_scale: the fp16 loss scale the fractions of gradients are computed at (None for
            bf16/fp32 candidates: gradients are unscaled there).
        rows: one per module that ran, in ``named_modules()`` order.
        findings: problems in the candidate precision, each at the module where it starts.
        recommendation: what to do about them.
        precision_map: dtypes under the candidate's autocast, per module (None if not run).
        formats: the facts of each format used (``NumberFormat.to_dict()``).
        scale_history: rows of a metrics.jsonl (step, scale, skipped, loss), when given.
    """

    precision: str
    device: str
    steps: int
    loss_scale: float | None
    rows: tuple[ModuleRow, ...]
    findings: tuple[Finding, ...]
    recommendation: Recommendation
    precision_map: tuple[MapRow, ...] | None = None
    formats: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scale_history: tuple[Mapping[str, Any], ...] | None = None

    def row(self, name: str) -> ModuleRow:
        """The row of module ``name``.

        Raises:
            KeyError: no module of that name ran.
        """
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no module named {name!r} ran during the diagnosis")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "precision": self.precision,
            "device": self.device,
            "steps": self.steps,
            "loss_scale": self.loss_scale,
            "findings": [f.to_dict() for f in self.findings],
            "recommendation": self.recommendation.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "precision_map": (
                None if self.precision_map is None else [asdict(m) for m in self.precision_map]
            ),
            "formats": _clean(dict(self.formats)),
            "scale_history": None if self.scale_history is None else list(self.scale_history),
        }

    def to_json(self, path: str | Path | None = None) -> str:
        """Strict JSON of :meth:`to_dict`; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    def to_text(self) -> str:
        """The terminal report: findings, recommendation, per-module table, precision map."""
        from ampkit.doctor.text import render_text

        return render_text(self)

    def to_html(self, path: str | Path) -> Path:
        """Write a self-contained HTML report (inline plots, no network) to ``path``."""
        from ampkit.doctor.html import write_html

        return write_html(self, Path(path))


def _clean(value: Any) -> Any:
    """Replace non-finite floats by None, recursively, so the result is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value

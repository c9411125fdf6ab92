"""The rows of a doctor report: findings, the recommendation, per-module statistics, and the
precision map; plus :class:`ReportView`, what renderers read from a report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from ampkit._files import json_safe
from ampkit.precision.stats import HIST_MIN_EXPONENT, Fit

__all__ = [
    "Alternative",
    "FindingKind",
    "MapRow",
    "ModuleRow",
    "NumericsFinding",
    "Phase",
    "PhaseRow",
    "Recommendation",
    "ReportView",
]

FindingKind = Literal["overflow", "underflow", "precision-loss", "non-finite"]
Phase = Literal["forward", "backward"]


@dataclass(frozen=True)
class NumericsFinding:
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
        through: the pass-through module (Dropout, Identity, ...) the problem was seen at,
            when it was moved from there to the module that made the values.
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
    through: str | None = None

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (non-finite numbers become None)."""
        return json_safe(asdict(self))


@dataclass(frozen=True)
class Alternative:
    """Another way to train the model, offered when the recommendation keeps most of the
    compute in fp32.

    Attributes:
        precision: ``fp32``, ``fp16`` or ``bf16``.
        keep_fp32: module names to run in fp32 with it.
        fp32_compute: share of the compute that runs in fp32 (see
            :attr:`Recommendation.fp32_compute`).
        why: what it costs and what it gives, in one sentence.
    """

    precision: str
    keep_fp32: tuple[str, ...]
    fp32_compute: float
    why: str


@dataclass(frozen=True)
class Recommendation:
    """How to train this model, from what the doctor measured.

    Attributes:
        precision: ``fp16``, ``bf16`` or ``fp32``: the lowest precision the numbers allow;
            None while the fp32 run itself makes inf/NaN (fix that first: no precision helps).
        init_scale: initial loss scale for fp16 (the scale dynamic scaling settles on for these
            gradients); None for bf16/fp32.
        keep_fp32: module names to run in fp32 (apply with :func:`ampkit.keep_fp32`).
        reasons: one sentence per decision.
        hardware: what ``resolve_precision("auto")`` picks on this machine, and why (whether
            mixed precision is faster here at all).
        fp32_compute: share of the model's compute inside ``keep_fp32`` (the matmul,
            convolution and attention FLOPs of one forward pass; the parameters where none are
            counted); None when nothing is kept fp32.
        fp32_params: share of the model's parameters inside ``keep_fp32``; None when nothing
            is kept fp32 or the model has no parameters.
        alternatives: when ``fp32_compute`` is above :data:`~ampkit.doctor.findings.MOSTLY_FP32`:
            plain fp32, this recommendation with its cost, and (where only precision loss
            was found) the precision without islands with the measured error.
    """

    precision: str | None
    init_scale: float | None
    keep_fp32: tuple[str, ...]
    reasons: tuple[str, ...]
    hardware: str = ""
    fp32_compute: float | None = None
    fp32_params: float | None = None
    alternatives: tuple[Alternative, ...] = ()

    def snippet(self) -> str:
        """Python that applies this recommendation with :class:`ampkit.MixedPrecision`."""
        if self.precision is None:
            return "# nothing to apply: fix the inf/NaN the fp32 run makes, then diagnose again"
        lines = []
        if self.keep_fp32:
            lines.append(f"islands = ampkit.keep_fp32(model, {list(self.keep_fp32)!r})")
        scaler = ""
        if self.init_scale is not None:
            scaler = f", scaler=ampkit.LossScaler(init_scale={self.init_scale:g})"
        lines.append(f'with ampkit.MixedPrecision("{self.precision}"{scaler}) as mp: ...')
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return json_safe(asdict(self))


@dataclass(frozen=True)
class PhaseRow:
    """One module's activations (forward) or gradients (backward), measured in fp32.

    Attributes:
        count, zeros, nonfinite: values seen, exact zeros, inf/NaN.
        max_abs, min_abs: largest and smallest non-zero finite magnitude.
        fits: per format, how the values would fare (:class:`~ampkit.precision.stats.Fit`).
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
        return json_safe(data)


@dataclass(frozen=True)
class ModuleRow:
    """Everything measured for one module.

    Attributes:
        name, type: as in ``named_modules()`` and the class name.
        calls: forward calls seen over all steps.
        forward, backward: activation and gradient statistics (None if never seen).
        rel_error: per candidate format, the largest relative error (L2) of the module's
            output when re-run under autocast in that format from the same fp32 inputs.
        pass_through: the module only forwards its inputs' values (Identity, Dropout, a
            parameter-free module that kept its inputs' range); it has no findings of its own.
    """

    name: str
    type: str
    calls: int
    forward: PhaseRow | None
    backward: PhaseRow | None
    rel_error: Mapping[str, float]
    pass_through: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "name": self.name,
            "type": self.type,
            "calls": self.calls,
            "forward": self.forward.to_dict() if self.forward else None,
            "backward": self.backward.to_dict() if self.backward else None,
            "rel_error": json_safe(dict(self.rel_error)),
            "pass_through": self.pass_through,
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


class ReportView(Protocol):
    """What the text and HTML renderers read from a :class:`~ampkit.NumericsReport`."""

    @property
    def precision(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def steps(self) -> int: ...

    @property
    def loss_scale(self) -> float | None: ...

    @property
    def rows(self) -> Sequence[ModuleRow]: ...

    @property
    def findings(self) -> Sequence[NumericsFinding]: ...

    @property
    def recommendation(self) -> Recommendation: ...

    @property
    def precision_map(self) -> Sequence[MapRow] | None: ...

    @property
    def formats(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def scale_history(self) -> Sequence[Mapping[str, Any]] | None: ...

    @property
    def measured_format(self) -> str: ...

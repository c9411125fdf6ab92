"""What :func:`ampkit.diagnose` returns: the report, and its JSON, text and HTML renderings.

:class:`NumericsReport` is what :func:`ampkit.diagnose` returns. ``to_json()`` gives strict JSON
(non-finite numbers become ``null``), ``to_text()`` the terminal tables, ``to_html(path)`` a
self-contained page with plots (needs matplotlib, a dependency of ampkit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ampkit._files import atomic_write, json_safe
from ampkit.doctor.html import render_html, write_html
from ampkit.doctor.rows import MapRow, ModuleRow, NumericsFinding, Recommendation
from ampkit.doctor.text import render_text
from ampkit.precision.modes.base import DoctorSection

__all__ = ["NumericsReport"]


@dataclass(frozen=True)
class NumericsReport:
    """The result of :func:`ampkit.diagnose`.

    Attributes:
        precision: the candidate precision that was diagnosed, as requested (canonical:
            ``"fp8"``, ``"bf16-true"``, ...).
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
        measured_as: the autocast format whose numerics were measured, when it is not
            ``precision`` itself (``"bf16"`` for fp8 and bf16-true).
        sections: what the precision mode adds (fp8: the per-layer plan; bf16-true: the
            lost-updates probe), each under its ``key`` in the JSON.
    """

    precision: str
    device: str
    steps: int
    loss_scale: float | None
    rows: tuple[ModuleRow, ...]
    findings: tuple[NumericsFinding, ...]
    recommendation: Recommendation
    precision_map: tuple[MapRow, ...] | None = None
    formats: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scale_history: tuple[Mapping[str, Any], ...] | None = None
    measured_as: str | None = None
    sections: tuple[DoctorSection, ...] = ()

    @property
    def measured_format(self) -> str:
        """The format the numerics were measured in (``measured_as``, else ``precision``)."""
        return self.measured_as or self.precision

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
            "measured_as": self.measured_format,
            "device": self.device,
            "steps": self.steps,
            "loss_scale": self.loss_scale,
            "findings": [f.to_dict() for f in self.findings],
            "recommendation": self.recommendation.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "precision_map": (
                None if self.precision_map is None else [asdict(m) for m in self.precision_map]
            ),
            "formats": json_safe(dict(self.formats)),
            "scale_history": None if self.scale_history is None else list(self.scale_history),
            **{s.key: json_safe(s.to_dict()) for s in self.sections},
        }

    def to_json(self, path: str | Path | None = None) -> str:
        """Strict JSON of :meth:`to_dict`; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False)
        if path is not None:
            atomic_write(path, text + "\n")
        return text

    def to_text(self, *, findings_only: bool = False) -> str:
        """The terminal report: findings, recommendation, then (unless ``findings_only``) the
        per-module table and the precision map; the precision mode's sections after it."""
        return "\n\n".join(
            [render_text(self, findings_only=findings_only), *(s.to_text() for s in self.sections)]
        )

    def to_html(self, path: str | Path) -> Path:
        """Write a self-contained HTML report (inline plots, no network) to ``path``."""
        return write_html(self, Path(path))

    def _repr_html_(self) -> str:
        """The HTML report of ``to_html``, inline in a notebook."""
        return render_html(self)

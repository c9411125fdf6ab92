"""What :func:`ampkit.export` returns: the file, what stayed fp32 and why, and the parity table."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field

from ampkit.deploy.parity import ParityReport

__all__ = ["ExportResult"]


def _size(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


@dataclass(frozen=True)
class ExportResult:
    """One export.

    Attributes:
        path: where the file was written (``None`` when parity failed and nothing was).
        format: ``onnx`` or ``torch-export``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        size_bytes: size of the exported file.
        fp32_size_bytes: size of the same model exported in fp32 (ONNX only; else None).
        keep_fp32: modules kept in fp32, and where each name came from (``doctor``/``user``).
        fp32_nodes: ONNX nodes kept in fp32 by reason (``op:Softmax``, ``module:head``,
            ``propagated``): how far the block-list reached in this graph.
        input_names, output_names: the exported model's inputs and outputs, in order.
        parity: the verdict tables, one per runtime (empty when the check was switched off).
        notes: everything the export changed or could not do, one sentence each: clipped
            constants, keep_fp32 names that matched nothing, a stand-in runtime.
        seconds: wall time of the whole export, parity check included.
    """

    path: str | None
    format: str
    precision: str
    size_bytes: int
    fp32_size_bytes: int | None
    keep_fp32: dict[str, str]
    fp32_nodes: dict[str, str]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    parity: tuple[ParityReport, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Every parity table passed (True when the check was switched off)."""
        return all(report.passed for report in self.parity)

    def _repr_html_(self) -> str:
        """The export's text report (size, fp32 nodes, the parity table), inline in a
        notebook."""
        import html

        return f"<pre>{html.escape(self.to_text())}</pre>"

    def to_text(self) -> str:
        """A short summary and the parity table."""
        where = self.path or "(nothing written: the parity check failed)"
        ratio = (
            f" ({self.size_bytes / self.fp32_size_bytes:.2f}x the fp32 file, "
            f"{_size(self.fp32_size_bytes)})"
            if self.fp32_size_bytes
            else ""
        )
        lines = [
            f"   exported  {where}",
            f"     format  {self.format}, {self.precision}",
            f"       size  {_size(self.size_bytes)}{ratio}",
            f"     inputs  {', '.join(self.input_names)}",
            f"    outputs  {', '.join(self.output_names)}",
        ]
        if self.keep_fp32:
            kept = ", ".join(f"{m} ({why})" for m, why in self.keep_fp32.items())
            lines.append(f"  kept fp32  {kept}")
        if self.fp32_nodes:
            reasons = Counter(r.split(":")[0] for r in self.fp32_nodes.values())
            ops = Counter(r[3:] for r in self.fp32_nodes.values() if r.startswith("op:"))
            by_op = ", ".join(f"{op} {n}" for op, n in sorted(ops.items()))
            no_bf16 = sorted({r.split(":", 1)[1] for r in self.fp32_nodes.values()
                              if r.startswith("no-bf16:")})  # fmt: skip
            lines.append(
                f" fp32 nodes  {len(self.fp32_nodes)}: by op {reasons['op']} ({by_op}), "
                f"by module {reasons['module']}, propagated {reasons['propagated']}"
                + (f", no bf16 in the op's schema {reasons['no-bf16']} ({', '.join(no_bf16)})"
                   if no_bf16 else "")
            )  # fmt: skip
        lines.append(f"       time  {self.seconds:.1f} s")
        lines.extend(f"       note  {n}" for n in self.notes)
        for report in self.parity:
            lines += ["", report.to_text()]
        if not self.parity:
            lines += ["", "parity check skipped (check=False)"]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values (``passed`` included)."""
        data = asdict(self)
        data["parity"] = [report.to_dict() for report in self.parity]
        data["passed"] = self.passed
        return data

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=2)

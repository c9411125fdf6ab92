"""The terminal rendering of a :class:`~ampkit.doctor.report.ReportView`."""

from __future__ import annotations

from ampkit._text_table import text_table
from ampkit.doctor.dtype_map import format_precision_map
from ampkit.doctor.rows import ModuleRow, PhaseRow, ReportView

__all__ = ["module_table", "render_text"]

_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


def _pct(x: float) -> str:
    if x == 0:
        return "."
    return f"{100 * x:.2g}%" if x >= 0.0001 else "<0.01%"


def _share(x: float) -> str:
    return f"{100 * x:.3g}%"


def _fits(phase: PhaseRow, fmt: str) -> str:
    fit = phase.fits.get(fmt)
    if fit is None:
        return "-"
    if fit.overflow:
        return f"OVER {_pct(fit.overflow)}"
    return _pct(fit.lost)


def _rel(row: ModuleRow, fmt: str) -> str:
    value = row.rel_error.get(fmt)
    if value is None:
        return "-"
    if value != value:  # NaN: the re-run failed
        return "n/a"
    return f"{value:.1e}"


def module_table(report: ReportView) -> str:
    """One line per module and phase: largest magnitude, and per format the share of values
    that overflow (``OVER``) or become subnormal/zero; the relative error of the output."""
    rel_fmt = report.measured_format if report.measured_format != "fp32" else None
    header = ["module", "type", "phase", "max|x|", *_FORMATS]
    if rel_fmt:
        header.append(f"err {rel_fmt}")
    body: list[list[str]] = []
    for row in report.rows:
        for phase_name, phase in (("fwd", row.forward), ("bwd", row.backward)):
            if phase is None:
                continue
            line = [
                row.name or "(model)" if phase_name == "fwd" or row.forward is None else "",
                row.type if phase_name == "fwd" or row.forward is None else "",
                phase_name + ("!" if phase.nonfinite else ""),
                f"{phase.max_abs:.2e}",
                *(_fits(phase, fmt) for fmt in _FORMATS),
            ]
            if rel_fmt:
                line.append(_rel(row, rel_fmt) if phase_name == "fwd" else "")
            body.append(line)
    return "\n".join(text_table([header, *body]))


def render_text(report: ReportView, *, findings_only: bool = False) -> str:
    """Findings first (what a person debugging a NaN reads), then the recommendation, then
    (unless ``findings_only``) the per-module table and the precision map."""
    rec = report.recommendation
    scale = f" (gradients at loss scale {report.loss_scale:g})" if report.loss_scale else ""
    measured = (
        f" (numerics of {report.measured_format} autocast)"
        if report.measured_format != report.precision
        else ""
    )
    out = [
        f"ampkit doctor: {report.precision}{measured} on {report.device}, {report.steps} fp32 "
        f"step(s){scale}",
        "",
    ]
    if report.findings:
        out.append(f"findings ({len(report.findings)}):")
        out += [f"  [{f.kind}, {f.phase}] {f.message}" for f in report.findings]
    else:
        out.append(
            "findings: none: no overflow, underflow, precision loss or inf/NaN in "
            f"{report.measured_format}"
        )
    out += [
        "",
        "recommendation:",
        f"  precision  {rec.precision or 'none until the inf/NaN is fixed'}",
    ]
    if rec.init_scale is not None:
        out.append(f"  init_scale {rec.init_scale:g}")
    out.append(f"  keep_fp32  {', '.join(rec.keep_fp32) or '(none)'}")
    if rec.fp32_compute is not None:
        out.append(
            f"  fp32 share {_share(rec.fp32_compute)} of the compute in the keep_fp32 modules"
        )
    out += [f"  why        {r}" for r in rec.reasons]
    if rec.alternatives:
        out.append("  alternatives:")
        for alt in rec.alternatives:
            islands = f", keep_fp32={list(alt.keep_fp32)!r}" if alt.keep_fp32 else ""
            out.append(f"    - {alt.precision}{islands}: {alt.why}")
    if rec.hardware:
        out.append(f"  hardware   {rec.hardware}")
    out += ["  apply it:", *("    " + line for line in rec.snippet().splitlines())]
    if findings_only:
        return "\n".join(out)
    out += [
        "",
        "per module (share of non-zero values that become subnormal or zero; OVER: share that "
        "overflows;",
        "fp16 gradients at the loss scale above, fp8 with per-tensor scaling; ! = inf/NaN seen):",
        module_table(report),
    ]
    if report.precision_map is not None:
        out += ["", f"precision map (dtypes under {report.precision} autocast):"]
        out.append(format_precision_map(report.precision_map))
    return "\n".join(out)

"""The HTML report: one self-contained page (inline CSS, PNG plots as data: URIs, no scripts,
no network), readable offline and attachable to an issue.

Per module, the distribution of activation and gradient magnitudes (``log2|x|`` histogram, log
x axis, log y axis so that a tail of a fraction of a percent shows) is drawn under bars for the range each format represents: thick from the smallest
normal value to the largest, thin down to the smallest subnormal. For gradients the fp16 bar is
divided by the loss scale (what fp16 covers in unscaled gradient units) and the fp8 bars are
placed by per-tensor scaling (their top at the largest magnitude). Plots are drawn with
matplotlib's object API (``Figure`` + Agg canvas), so pyplot's global state is never touched.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ampkit.doctor.dtype_map import format_precision_map
from ampkit.doctor.rows import ModuleRow, PhaseRow, ReportView
from ampkit.doctor.text import module_table
from ampkit.precision.stats import HIST_MIN_EXPONENT

__all__ = ["FORMAT_COLORS", "PAGE_CSS", "write_html"]

#: Colour of each format's range bar (also used by the rendering test to find the plots).
FORMAT_COLORS = {
    "fp16": "#d62728",
    "bf16": "#1f77b4",
    "fp8_e4m3": "#2ca02c",
    "fp8_e5m2": "#9467bd",
}
_MAX_PLOTS = 64

#: The style of ampkit's HTML pages (the doctor's, the comparison's, the run report's).
PAGE_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee;
  text-align: left; vertical-align: top; }
.kind { font-weight: 600; } .ok { color: #2a7d2a; } .bad { color: #b00020; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; font-size: 12px; }
figure { margin: 1em 0; } figcaption { font-family: monospace; margin-bottom: 4px; }
img { max-width: 100%; }
"""


def _png(fig: Any) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _ranges(
    report: ReportView, phase: str, stats: PhaseRow
) -> list[tuple[str, float, float, float]]:
    """``(format, smallest subnormal, smallest normal, max)`` in the units of the plot."""
    bars = []
    for name in FORMAT_COLORS:
        fmt = report.formats.get(name)
        if not fmt:
            continue
        sub, normal, top = fmt["smallest_subnormal"], fmt["smallest_normal"], fmt["max"]
        if name.startswith("fp8") and stats.max_abs > 0:
            factor = stats.max_abs / top  # per-tensor scaling maps amax to the format's max
        elif name == "fp16" and phase == "backward" and report.loss_scale:
            factor = 1 / report.loss_scale
        else:
            factor = 1.0
        bars.append((name, sub * factor, normal * factor, top * factor))
    return bars


def _panel(ax: Any, report: ReportView, phase: str, stats: PhaseRow | None) -> None:
    from matplotlib.ticker import LogLocator, NullLocator

    ax.set_xscale("log", base=10)
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=7))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_title(f"{'activations' if phase == 'forward' else 'gradients'}", fontsize=9)
    ax.tick_params(labelsize=7)
    if stats is None or not any(stats.hist):
        ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlim(1e-10, 1e6)
        return
    total = sum(stats.hist)
    used = [i for i, c in enumerate(stats.hist) if c]
    lefts = [2.0 ** (HIST_MIN_EXPONENT + i) for i in used]
    fractions = [stats.hist[i] / total for i in used]
    # log y: a 0.2% tail past a format's range is as visible as the bulk of the values
    floor = min(fractions) / 4
    ax.bar(
        lefts,
        [f - floor for f in fractions],
        bottom=floor,
        width=[x for x in lefts],
        align="edge",
        color="#555555",
    )
    ax.set_yscale("log", base=10)
    ax.set_ylim(floor, max(fractions) * 40)  # the top of the panel is left to the format bars
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylabel("share of values (log)", fontsize=7)
    bars = _ranges(report, phase, stats)
    # the axis spans the data and the narrow formats; bf16 (fp32's range) runs off both ends
    narrow = [b for b in bars if b[0] != "bf16"]
    low = min([lefts[0], *(b[1] for b in narrow)]) / 16
    high = max([lefts[-1] * 2, *(b[3] for b in narrow)]) * 16
    ax.set_xlim(low, high)
    transform = ax.get_xaxis_transform()
    for k, (name, sub, normal, top) in enumerate(bars):
        y = 0.95 - 0.08 * k
        color = FORMAT_COLORS[name]
        ax.plot(
            [max(sub, low), max(normal, low)],
            [y, y],
            color=color,
            linewidth=1.5,
            transform=transform,
        )
        ax.plot(
            [max(normal, low), min(top, high)],
            [y, y],
            color=color,
            linewidth=6,
            transform=transform,
            solid_capstyle="butt",
        )
        ax.text(
            0.995,
            y,
            name,
            color=color,
            fontsize=7,
            va="center",
            ha="right",
            transform=ax.transAxes,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )


def _module_plot(report: ReportView, row: ModuleRow) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 2.4))
    axes = fig.subplots(1, 2)
    _panel(axes[0], report, "forward", row.forward)
    _panel(axes[1], report, "backward", row.backward)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.14, top=0.88, wspace=0.18)
    return _png(fig)


def _scale_plot(history: Sequence[Mapping[str, Any]]) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3))
    ax = fig.subplots()
    steps = [r["step"] for r in history]
    ax.step(steps, [r["scale"] for r in history], where="post", color="#d62728", label="loss scale")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale")
    skipped = [r for r in history if r.get("skipped")]
    if skipped:
        ax.plot(
            [r["step"] for r in skipped],
            [r["scale"] for r in skipped],
            "x",
            color="black",
            label="skipped step",
        )
    losses = [(r["step"], r["loss"]) for r in history if isinstance(r.get("loss"), (int, float))]
    handles, labels = ax.get_legend_handles_labels()
    if losses:
        twin = ax.twinx()
        twin.plot(*zip(*losses, strict=True), color="#1f77b4", linewidth=1, label="loss")
        twin.set_ylabel("loss")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, loc="upper right", fontsize=8)
    fig.subplots_adjust(left=0.08, right=0.92, bottom=0.16, top=0.95)
    return _png(fig)


def _findings_table(report: ReportView) -> str:
    if not report.findings:
        return (
            f"<p class='ok'>No overflow, underflow, precision loss or inf/NaN in "
            f"{html.escape(report.measured_format)}.</p>"
        )
    rows = "".join(
        f"<tr><td><code>{html.escape(f.module or '(model)')}</code></td>"
        f"<td class='kind bad'>{html.escape(f.kind)}</td><td>{f.phase}</td>"
        f"<td>{html.escape(f.precision)}</td><td>{html.escape(f.message)}</td></tr>"
        for f in report.findings
    )
    return (
        "<table><tr><th>module</th><th>kind</th><th>phase</th><th>in</th><th>what</th></tr>"
        f"{rows}</table>"
    )


def write_html(report: ReportView, path: Path) -> Path:
    """Render ``report`` to ``path`` (parent folders are created) and return the path."""
    text = render_html(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def render_html(report: ReportView) -> str:
    """The self-contained HTML page of ``report`` (inline plots, no network)."""
    rec = report.recommendation
    named = {f.module for f in report.findings}
    rows = sorted(report.rows, key=lambda r: r.name not in named)  # findings first, stable
    plotted = rows[:_MAX_PLOTS]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>ampkit doctor: {html.escape(report.precision)}</title>",
        f"<style>{PAGE_CSS}</style></head><body>",
        f"<h1>ampkit doctor: {html.escape(report.precision)} on {html.escape(report.device)}</h1>",
        f"<p>{report.steps} fp32 step(s) measured"
        + (f"; gradients at loss scale {report.loss_scale:g}" if report.loss_scale else "")
        + ".</p>",
        "<h2>Findings</h2>",
        _findings_table(report),
        "<h2>Recommendation</h2><table>",
        "<tr><th>precision</th><td>"
        + html.escape(rec.precision or "none until the inf/NaN is fixed")
        + "</td></tr>",
        f"<tr><th>init_scale</th><td>{'' if rec.init_scale is None else f'{rec.init_scale:g}'}"
        "</td></tr>",
        "<tr><th>keep_fp32</th><td>"
        + (html.escape(", ".join(rec.keep_fp32)) or "(none)")
        + "</td></tr>",
        *(
            [f"<tr><th>fp32 share</th><td>{100 * rec.fp32_compute:.3g}% of the compute</td></tr>"]
            if rec.fp32_compute is not None
            else []
        ),
        *(f"<tr><th>why</th><td>{html.escape(r)}</td></tr>" for r in rec.reasons),
        *(
            f"<tr><th>alternative</th><td>{html.escape(alt.precision)}"
            + (html.escape(f", keep_fp32={list(alt.keep_fp32)!r}") if alt.keep_fp32 else "")
            + f": {html.escape(alt.why)}</td></tr>"
            for alt in rec.alternatives
        ),
        f"<tr><th>hardware</th><td>{html.escape(rec.hardware)}</td></tr></table>",
        f"<pre>{html.escape(rec.snippet())}</pre>",
    ]
    if report.scale_history:
        parts += [
            "<h2>Loss-scale history</h2>",
            f"<img alt='loss scale per step' src='{_scale_plot(report.scale_history)}'>",
        ]
    parts += [
        "<h2>Magnitudes per layer</h2>",
        "<p>Grey: share of non-zero values per power of two (fp32 run; log scale, so a "
        "tail of 0.1% past a format's range is visible). Bars: the range of each "
        "format, thick for normal values, thin for subnormals. Gradients: fp16 in unscaled "
        "units (divided by the loss scale); fp8 placed by per-tensor scaling.</p>",
    ]
    for row in plotted:
        mark = " <span class='bad'>(finding)</span>" if row.name in named else ""
        parts.append(
            f"<figure><figcaption>{html.escape(row.name or '(model)')} "
            f"({html.escape(row.type)}){mark}</figcaption>"
            f"<img alt='magnitudes of {html.escape(row.name or 'the model')}' "
            f"src='{_module_plot(report, row)}'></figure>"
        )
    if len(rows) > len(plotted):
        parts.append(f"<p>{len(rows) - len(plotted)} more modules: see the table and the JSON.</p>")
    parts += ["<h2>Per-module table</h2>", f"<pre>{html.escape(module_table(report))}</pre>"]
    if report.precision_map is not None:
        parts += [
            f"<h2>Precision map ({html.escape(report.measured_format)} autocast)</h2>",
            f"<pre>{html.escape(format_precision_map(report.precision_map))}</pre>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts)

"""A comparison as text and as one self-contained HTML page (the doctor's page style: inline
CSS, one PNG plot of the error per module as a ``data:`` URI, no scripts, no network)."""

from __future__ import annotations

import base64
import html
import io
import math

from ampkit.divergence.diff import Diff, EntryDiff
from ampkit.doctor.html import PAGE_CSS

__all__ = ["render_html", "render_text"]


def _e(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2e}"


def _name(entry: EntryDiff) -> str:
    return entry.module or "(model)"


def _headline(diff: Diff) -> list[str]:
    lines = []
    if diff.reference_nonfinite:
        lines.append(
            f"the reference ({diff.a}) holds inf/NaN: nothing is called ok. Run "
            "`ampkit doctor` on it first."
        )
    if diff.first is not None:
        f = diff.first
        why = (
            f"non-finite in {diff.b} ({f.b_nonfinite} values), finite in {diff.a}"
            if f.b_nonfinite and not f.a_nonfinite
            else f"relative error {_e(f.error)} > tolerance {_e(diff.tolerance)}"
        )
        lines.append(f"first parts at {_name(f)} ({f.key.split(':')[-1]}): {why}")
    else:
        worst = max((e.error for e in diff.entries if e.kind == "forward"), default=0.0)
        lines.append(
            f"forward: no module parts beyond the tolerance {_e(diff.tolerance)} "
            f"(largest error {_e(worst)})"
        )
    if diff.first_grad is not None:
        g = diff.first_grad
        lines.append(f"gradients first part at {_name(g)} (in backward order): error {_e(g.error)}")
    else:
        lines.append("gradients: every module's parameter gradients within the tolerance")
    return lines


def render_text(diff: Diff, *, rows: int = 15) -> str:
    """The headline, the contributors and the largest errors, for the terminal."""
    meta_a, meta_b = diff.meta_a, diff.meta_b
    lines = [
        f"compare {meta_a.get('model')}: {diff.a} ({meta_a.get('device')}) vs {diff.b} "
        f"({meta_b.get('device')}); loss {meta_a.get('loss'):.6g} vs {meta_b.get('loss'):.6g}",
        *_headline(diff),
    ]
    if diff.contributors:
        lines.append("largest contributors (error added by the module):")
        lines += [
            f"  {_name(c):<32} +{_e(c.added)}  (in {_e(c.input_error or 0.0)} -> out {_e(c.error)})"
            for c in diff.contributors
        ]
    if diff.only_a or diff.only_b:
        lines.append(
            f"recorded on one side only: {len(diff.only_a)} in {diff.a}, {len(diff.only_b)} in "
            f"{diff.b} (another code path)"
        )
    worst = sorted(diff.entries, key=lambda e: e.error, reverse=True)[:rows]
    lines.append(f"{'tensor':<40} {'error':>9} {'max |diff|':>10}  absmax a/b")
    lines += [
        f"{e.key:<40} {_e(e.error):>9} {_e(e.max_abs):>10}  {e.a_absmax:.3g}/{e.b_absmax:.3g}"
        + ("  PARTED" if e.diverged else "")
        for e in worst
    ]
    return "\n".join(lines)


def _plot(diff: Diff) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.2))
    ax = fig.subplots()
    for kind, color, marker in (("forward", "#1f77b4", "o"), ("grad", "#d62728", "s")):
        points = [(i, e) for i, e in enumerate(diff.entries) if e.kind == kind]
        if not points:
            continue
        top = max([e.error for _, e in points if math.isfinite(e.error)] + [diff.tolerance]) * 10
        xs = [i for i, _ in points]
        ys = [max(e.error, 1e-12) if math.isfinite(e.error) else top for _, e in points]
        ax.plot(xs, ys, marker, color=color, markersize=4, label=kind, linestyle="-", lw=0.6)
    ax.axhline(diff.tolerance, color="black", linestyle="--", linewidth=1, label="tolerance")
    ax.set_yscale("log")
    ax.set_xlabel("tensor (execution order; gradients after)", fontsize=8)
    ax.set_ylabel("relative error (inf drawn at the top)", fontsize=8)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.16, top=0.95)
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def render_html(diff: Diff) -> str:
    """The self-contained page."""
    title = f"ampkit compare: {diff.a} vs {diff.b}"
    bad = diff.parted or diff.reference_nonfinite
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{PAGE_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<h2>Where they part</h2>",
        *(
            f"<p class='{'bad' if bad else 'ok'}'>{html.escape(line)}</p>"
            for line in _headline(diff)
        ),
        "<h2>Sides</h2><table><tr><th></th><th>A (reference)</th><th>B</th></tr>",
        *(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(diff.meta_a.get(k)))}</td>"
            f"<td>{html.escape(str(diff.meta_b.get(k)))}</td></tr>"
            for k in (
                "model",
                "precision",
                "compute_dtype",
                "compile",
                "weights",
                "device",
                "torch",
                "loss",
                "loss_scale",
            )
        ),
        "</table>",
        f"<h2>Error per tensor</h2><img alt='relative error per tensor' src='{_plot(diff)}'>",
    ]
    if diff.contributors:
        parts.append(
            "<h2>Largest contributors</h2><table><tr><th>module</th><th>error added</th>"
            "<th>input error</th><th>output error</th></tr>"
        )
        parts += [
            f"<tr><td><code>{html.escape(_name(c))}</code></td><td>{_e(c.added)}</td>"
            f"<td>{_e(c.input_error or 0.0)}</td><td>{_e(c.error)}</td></tr>"
            for c in diff.contributors
        ]
        parts.append("</table>")
    parts.append(
        "<h2>Every tensor</h2><table><tr><th>tensor</th><th>error</th><th>max |diff|</th>"
        "<th>absmax A</th><th>absmax B</th><th>inf/NaN A/B</th><th>bitwise</th></tr>"
    )
    for e in diff.entries:
        css = " class='bad'" if e.diverged else ""
        parts.append(
            f"<tr{css}><td><code>{html.escape(e.key)}</code></td><td>{_e(e.error)}</td>"
            f"<td>{_e(e.max_abs)}</td><td>{e.a_absmax:.3g}</td><td>{e.b_absmax:.3g}</td>"
            f"<td>{e.a_nonfinite}/{e.b_nonfinite}</td><td>{'yes' if e.bitwise else ''}</td></tr>"
        )
    parts += [
        "</table>",
        f"<p>Method: relative L2 error of B against A over at most a bounded sample of each "
        f"tensor (the same positions on both sides); tolerance {_e(diff.tolerance)} = "
        "the factor times eps of the narrower compute format.</p>",
        "</body></html>",
    ]
    return "\n".join(parts)

"""The report page: one self-contained HTML file (inline CSS, PNG plots as ``data:`` URIs, no
scripts, no network), in the doctor's style, and the same facts as text for the terminal."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from typing import Any

from ampkit.runs.plots import COLORS, Plot
from ampkit.runs.runs import Run, RunGroup
from ampkit.runs.verdict import METHOD, Verdict

__all__ = ["render_html", "render_text", "run_facts"]

#: The doctor's page style (``doctor.html.PAGE_CSS``) and the report's own classes, written out
#: here because the doctor's module imports torch and a report must not.
_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee;
  text-align: left; vertical-align: top; }
.ok { color: #2a7d2a; } .bad { color: #b00020; } .maybe { color: #a06000; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: middle; }
figure { margin: 1em 0; } img { max-width: 100%; } .method { color: #555; font-size: 13px; }
"""

_OUTCOME_CLASS = {"within": "ok", "better": "ok", "worse": "bad", "inconclusive": "maybe"}


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "(none)"
    return str(value)


def run_facts(run: Run) -> list[tuple[str, str]]:
    """The header of one run: what it trained in and why, the dtype decisions, the hardware,
    its length and wall time, and the segments it was resumed in."""
    s = run.summary or {}
    c = run.config
    rows = [
        ("path", run.path),
        ("precision", _fmt(s.get("precision") or c.get("precision"))),
        ("why", _fmt(s.get("reason"))),
        ("device", _fmt(s.get("device"))),
        ("processes", _fmt(s.get("world_size")) if s.get("world_size", 1) != 1 else ""),
        ("steps", f"{run.steps[-1]} ({len(run.rows)} logged rows)"),
        ("skipped steps", str(len(run.skipped_steps))),
        ("final loss", _fmt(s.get("final_loss"))),
        ("wall time", f"{s['wall_s']:.1f} s" if isinstance(s.get("wall_s"), (int, float)) else ""),
        (
            "peak memory",
            f"{s['peak_memory_bytes'] / 2**20:.0f} MiB ({s.get('peak_memory_kind', '')})"
            if isinstance(s.get("peak_memory_bytes"), int)
            else "",
        ),
        ("seed", _fmt(c.get("seed"))),
        ("keep_fp32", _fmt(c.get("keep_fp32"))),
        # the precision mode's own rows, as the run's summary wrote them (``mode_rows``)
        *((str(label), str(value)) for label, value in s.get("mode_rows") or []),
        ("resumed from", _fmt(s.get("resumed_from"))),
        (
            "precision changes",
            "; ".join(
                f"step {r['step']}: {r['precision_change']}"
                for r in run.rows
                if r.get("precision_change")
            ),
        ),
        ("notes", "; ".join(map(str, s.get("notes") or []))),
    ]
    if not s:
        rows.append(("summary", "no summary.json (an unfinished run): metrics only"))
    return [(k, v) for k, v in rows if v]


def _verdict_rows(verdicts: Sequence[Verdict]) -> str:
    out = []
    for v in verdicts:
        css = _OUTCOME_CLASS[v.outcome]
        out.append(
            f"<tr><td>{html.escape(v.label)}</td><td class='{css}'><b>{html.escape(v.verdict)}"
            f"</b></td><td>{v.final:.4f} vs {v.final_ref:.4f}</td><td>{v.mean:.4f} vs "
            f"{v.mean_ref:.4f}</td><td>{_fmt(v.sigma)} ({v.noise})</td><td>{v.metric}, steps "
            f"{v.steps[0]}-{v.steps[1]}</td></tr>"
        )
    return "".join(out)


def render_html(
    groups: Sequence[RunGroup], verdicts: Sequence[Verdict], plots: Sequence[Plot], align: str
) -> str:
    """The self-contained page."""
    runs = [run for g in groups for run in g.runs]
    title = "ampkit report: " + ", ".join(g.label for g in groups)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{len(runs)} run(s) in {len(groups)} setting(s), aligned by {align}.</p>",
    ]
    if verdicts:
        parts += [
            f"<h2>Convergence verdict (reference: {html.escape(verdicts[0].reference)})</h2>",
            "<table><tr><th>run</th><th>verdict</th><th>final loss</th><th>mean loss</th>"
            f"<th>sigma</th><th>measured on</th></tr>{_verdict_rows(verdicts)}</table>",
            f"<p class='method'>Method: {html.escape(METHOD)}</p>",
        ]
    parts.append("<h2>Plots</h2>")
    for plot in plots:
        data = base64.b64encode(plot.png).decode("ascii")
        parts.append(
            f"<figure><img alt='{html.escape(plot.title)}' src='data:image/png;base64,{data}'>"
            "</figure>"
        )
    parts.append("<h2>Runs</h2>")
    for index, group in enumerate(groups):
        color = COLORS[index % len(COLORS)]
        for run in group.runs:
            facts = "".join(
                f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                for k, v in run_facts(run)
            )
            parts.append(
                f"<h3><span class='swatch' style='background:{color}'></span> "
                f"{html.escape(run.label)}</h3><table>{facts}</table>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def render_text(groups: Sequence[RunGroup], verdicts: Sequence[Verdict]) -> str:
    """The runs and the verdicts as terminal lines."""
    lines = []
    for group in groups:
        for run in group.runs:
            last = run.rows[-1]
            lines.append(
                f"{run.label:<24} {run.precision:<10} step {last['step']:>7}  loss "
                f"{_fmt(last.get('loss')):>8}  skipped {len(run.skipped_steps)}"
            )
    for v in verdicts:
        lines.append(f"{v.label} vs {v.reference}: {v.verdict} ({v.metric}, noise from {v.noise})")
    return "\n".join(lines)

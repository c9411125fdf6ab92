"""The report's plots, drawn with matplotlib's object API (``Figure`` + Agg canvas: pyplot's
global state is never touched), one figure per logged series, every run on shared axes.

matplotlib is a core dependency already (the doctor draws with it), needs no JavaScript in
the page and writes the same figure as PNG for ``--png``; a page of PNG images stays the same
size whatever the number of steps, since every series is reduced to a min/max envelope of at
most ``points`` buckets first (:mod:`ampkit.runs.downsample`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ampkit.runs.downsample import envelope
from ampkit.runs.runs import SERIES, Run, RunGroup

__all__ = ["COLORS", "Plot", "draw_plots"]

#: One colour per run group (seed sets share theirs); also what the page test looks for.
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")

#: Series drawn on a log y axis.
_LOG = frozenset({"scale", "grad_norm"})


@dataclass(frozen=True)
class Plot:
    """One rendered figure: ``key`` (the series, or ``loss``), its title and PNG bytes."""

    key: str
    title: str
    png: bytes


def _xs(run: Run, steps: Sequence[int], align: str) -> np.ndarray:
    x = np.asarray(steps, dtype=np.float64)
    if align == "tokens" and run.tokens_per_step:
        return x * run.tokens_per_step
    return x


def _smooth(values: Sequence[float]) -> np.ndarray:
    """A centred moving average over a fiftieth of the series (NaN rows left out)."""
    y = np.asarray(values, dtype=np.float64)
    k = max(1, len(y) // 50)
    if k == 1:
        return y
    finite = np.isfinite(y)
    kernel = np.ones(k)
    sums = np.convolve(np.where(finite, y, 0.0), kernel, mode="same")
    counts = np.convolve(finite.astype(np.float64), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


def _draw(
    ax: Any, run: Run, key: str, color: str, align: str, points: int, label: str | None
) -> None:
    steps, values = run.series(key)
    if not steps:
        return
    x = _xs(run, steps, align)
    smooth = key == "loss" and len(values) > 50
    env = envelope(x, values, points)
    if env.downsampled:
        ax.fill_between(env.x, env.low, env.high, color=color, alpha=0.25, linewidth=0)
    line = env.mean
    if smooth:
        ax.plot(env.x, env.mean, color=color, alpha=0.35, linewidth=0.8)
        line = envelope(x, _smooth(values), points).mean
    ax.plot(env.x, line, color=color, linewidth=1.4, label=label)
    if len(env.nonfinite):
        # inf/NaN has no height: marked along the top edge
        ax.plot(
            env.nonfinite,
            np.ones(len(env.nonfinite)),
            "v",
            color=color,
            transform=ax.get_xaxis_transform(),
            markersize=5,
        )


def _mark_skipped(ax: Any, run: Run, key: str, align: str) -> int:
    """Skipped steps as black crosses on the curve (loss and loss scale); returns how many."""
    skipped = set(run.skipped_steps)
    if not skipped:
        return 0
    steps, values = run.series(key)
    points = [(s, v) for s, v in zip(steps, values, strict=True) if s in skipped]
    if not points:
        return 0
    xs = _xs(run, [s for s, _ in points], align)
    ys = [v if np.isfinite(v) else np.nan for _, v in points]
    ax.plot(xs, ys, "x", color="black", markersize=6, markeredgewidth=1.5)
    return len(points)


def _series_keys(groups: Sequence[RunGroup]) -> list[str]:
    present: dict[str, None] = {}
    for group in groups:
        for run in group.runs:
            present.update(dict.fromkeys(run.keys))
    keys = [k for k in SERIES if k in present and k != "eval_loss"]
    if "tokens_per_s" in keys and "samples_per_s" in keys:
        keys.remove("samples_per_s")
    extra = [k for k in present if k.startswith("eval_") and k != "eval_loss"]
    # what a precision mode logs under its own keys (declared by the mode, never named here)
    mode = [
        k
        for k in present
        if k not in SERIES and k not in _NOT_SERIES and k not in extra and _numeric(groups, k)
    ]
    return keys + extra + mode


#: Keys of a row that are not a curve (the x axis, flags, text).
_NOT_SERIES = frozenset({"step", "skipped", "precision_change"})


def _numeric(groups: Sequence[RunGroup], key: str) -> bool:
    """Whether every value some run logged under ``key`` is a number (None for non-finite)."""
    values = [r[key] for g in groups for run in g.runs for r in run.rows if key in r]
    return any(v is not None for v in values) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values
    )


def _has_values(groups: Sequence[RunGroup], key: str) -> bool:
    if key == "scale":  # a loss scale of 1.0 throughout (no scaler) says nothing
        return any(
            {v for _, v in zip(*run.series("scale"), strict=True)} - {1.0}
            for g in groups
            for run in g.runs
        )
    return any(run.series(key)[0] for g in groups for run in g.runs)


def draw_plots(
    groups: Sequence[RunGroup], *, align: str = "step", points: int = 2000
) -> list[Plot]:
    """One :class:`Plot` per series that some run logged (the loss first)."""
    from matplotlib.figure import Figure

    plots = []
    for key in _series_keys(groups):
        if not _has_values(groups, key):
            continue
        title, unit = SERIES.get(key) or (
            (key.removeprefix("eval_") + " (eval)", key)
            if key.startswith("eval_")
            else (key.replace("_", " "), key)
        )
        fig = Figure(figsize=(10, 3.2 if key == "loss" else 2.6))
        ax = fig.subplots()
        skipped = 0
        for index, group in enumerate(groups):
            color = COLORS[index % len(COLORS)]
            for number, run in enumerate(group.runs):
                label = group.label if number == 0 else None
                _draw(ax, run, key, color, align, points, label)
                if key == "loss":
                    _draw_eval(ax, run, color, align)
                if key in ("loss", "scale"):
                    skipped += _mark_skipped(ax, run, key, align)
        if key in _LOG:
            ax.set_yscale("log", base=2 if key == "scale" else 10)
        if skipped:
            ax.plot([], [], "x", color="black", label=f"skipped step ({skipped})")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("tokens" if align == "tokens" else "step", fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.subplots_adjust(left=0.08, right=0.99, bottom=0.17, top=0.89)
        plots.append(Plot(key=key, title=title, png=_png(fig)))
    return plots


def _draw_eval(ax: Any, run: Run, color: str, align: str) -> None:
    steps, values = run.series("eval_loss")
    if steps:
        ax.plot(_xs(run, steps, align), values, "o--", color=color, markersize=3, linewidth=0.8)

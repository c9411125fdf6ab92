"""``ampkit report``: a run's plots, runs side by side, and a convergence verdict.

:func:`report` reads run folders (``metrics.jsonl`` and ``summary.json``, as files: no torch),
gathers runs that differ only in their seed into seed sets, and returns a
:class:`RunReport`: the plots of every logged series with all runs on shared axes, a header
per run, and, for two settings or more, whether each one's loss is within the noise of the
first (:mod:`ampkit.runs.verdict`). It renders as one self-contained HTML page
(:meth:`RunReport.to_html`, also Jupyter's inline display), PNG files (:meth:`RunReport.write_pngs`),
JSON and text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ampkit._files import json_safe
from ampkit.errors import ConfigurationError
from ampkit.runs.page import render_html, render_text, run_facts
from ampkit.runs.plots import Plot, draw_plots
from ampkit.runs.runs import Run, RunGroup, group_runs, load_run
from ampkit.runs.verdict import METHOD, Verdict, compare_groups

__all__ = ["ALIGNS", "Run", "RunGroup", "RunReport", "Verdict", "load_run", "report"]

#: What the x axis of the plots counts.
ALIGNS = ("step", "tokens")


@dataclass(frozen=True)
class RunReport:
    """Runs, their seed sets, the verdicts against the first set, and the plots.

    Attributes:
        groups: the runs by setting (a seed set is one group); the first is the reference.
        verdicts: each later group against the reference (empty for one setting).
        align: ``"step"`` or ``"tokens"``: the x axis of the plots.
        points: most points per drawn series (longer series become min/max envelopes).
    """

    groups: tuple[RunGroup, ...]
    verdicts: tuple[Verdict, ...]
    align: str = "step"
    points: int = 2000
    _plots: list[Plot] = field(default_factory=list, repr=False, compare=False)

    @property
    def runs(self) -> list[Run]:
        return [run for g in self.groups for run in g.runs]

    def plots(self) -> list[Plot]:
        """The figures (drawn once, on first use)."""
        if not self._plots:
            self._plots.extend(draw_plots(self.groups, align=self.align, points=self.points))
        return list(self._plots)

    def render_html(self) -> str:
        """The self-contained page as a string."""
        return render_html(self.groups, self.verdicts, self.plots(), self.align)

    def to_html(self, path: str | Path) -> Path:
        """Write the page to ``path`` (parent folders are created); return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.render_html(), encoding="utf-8")
        return target

    def _repr_html_(self) -> str:
        """Jupyter's inline display: the same page ``to_html`` writes."""
        return self.render_html()

    def write_pngs(self, folder: str | Path) -> list[Path]:
        """Write each plot as ``<series>.png`` into ``folder`` (created); return the paths."""
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for plot in self.plots():
            path = target / f"{plot.key}.png"
            path.write_bytes(plot.png)
            written.append(path)
        return written

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values: runs (header facts, last row), groups, verdicts, method."""
        return json_safe(
            {
                "align": self.align,
                "groups": [
                    {"label": g.label, "runs": [r.label for r in g.runs]} for g in self.groups
                ],
                "runs": [
                    {
                        "label": r.label,
                        "facts": dict(run_facts(r)),
                        "rows": len(r.rows),
                        "skipped_steps": r.skipped_steps,
                        "last": r.rows[-1],
                    }
                    for r in self.runs
                ],
                "verdicts": [v.to_dict() for v in self.verdicts],
                "method": METHOD,
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_text(self) -> str:
        return render_text(self.groups, self.verdicts)


def report(
    runs: Sequence[str | Path | Run],
    *,
    align: str = "step",
    labels: Sequence[str] | None = None,
    points: int = 2000,
    progress: Callable[[str, int, int], None] | None = None,
) -> RunReport:
    """Read ``runs`` and compare every setting with the first one.

    Args:
        runs: run folders (``ampkit train --out DIR``), ``metrics.jsonl`` files or
            :class:`Run` objects; runs of one setting that differ only in ``--seed`` form a
            seed set. The first setting is the reference of the verdict.
        align: ``"step"`` or ``"tokens"`` (from each run's recorded batch size and sequence
            length; runs without them stay in steps).
        labels: a name per run for the page (default: the folder names).
        points: most points drawn per series; longer series become min/max envelopes.
        progress: ``progress(stage, done, total)`` while reading the runs.

    Raises:
        ConfigurationError: no runs, an unknown ``align``, labels that do not match the runs,
            a path that is not a run.
        DataError: a damaged ``metrics.jsonl`` or ``summary.json``.
    """
    if not runs:
        raise ConfigurationError(
            "runs: none given. Pass one run folder or more (ampkit train --out DIR).",
        )
    if align not in ALIGNS:
        raise ConfigurationError(
            f"align: {align!r} is not an alignment. Use one of {', '.join(ALIGNS)}.",
            argument="align",
        )
    if labels is not None and len(labels) != len(runs):
        raise ConfigurationError(
            f"labels: {len(labels)} given for {len(runs)} runs. Give one label per run.",
            argument="labels",
        )
    if not isinstance(points, int) or isinstance(points, bool) or points < 10:
        raise ConfigurationError(
            f"points: {points!r} is invalid. Use an integer >= 10.", argument="points"
        )
    loaded = []
    for index, item in enumerate(runs):
        label = labels[index] if labels is not None else None
        loaded.append(item if isinstance(item, Run) else load_run(item, label))
        if progress is not None:
            progress("reading runs", index + 1, len(runs))
    groups = _unique_labels(group_runs(loaded))
    verdicts = compare_groups(groups[0], groups[1:]) if len(groups) > 1 else []
    return RunReport(tuple(groups), tuple(verdicts), align=align, points=points)


def _unique_labels(groups: list[RunGroup]) -> list[RunGroup]:
    """Two settings with the same label (two fp32 seed sets) get ``#2``, ``#3``."""
    seen: dict[str, int] = {}
    result = []
    for group in groups:
        seen[group.label] = seen.get(group.label, 0) + 1
        label = group.label if seen[group.label] == 1 else f"{group.label} #{seen[group.label]}"
        result.append(RunGroup(label=label, runs=group.runs))
    return result

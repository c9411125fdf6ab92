"""A run as ``ampkit report`` reads it: the rows of its ``metrics.jsonl`` (what
:class:`~ampkit.trainer.callbacks.MetricsFile` writes, one JSON object per logged step) and,
when present, its ``summary.json`` (what ``ampkit train --out`` writes at the end).

Both are read as files, so the report needs no torch and reads runs from another machine.
Runs of one setting that differ only in ``--seed`` form a *seed set* (:func:`group_runs`): the
verdict measures the noise across them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampkit.errors import ConfigurationError, DataError

__all__ = ["SERIES", "Run", "RunGroup", "group_runs", "load_run"]

#: The logged series a report can plot: key of a row -> (title, unit). Eval metrics
#: (``eval_<name>``) and the numbers a precision mode logs under its own keys (bf16-true's
#: shares of lost updates) are found in the rows themselves.
SERIES: dict[str, tuple[str, str]] = {
    "loss": ("training loss", "loss"),
    "eval_loss": ("eval loss", "loss"),
    "lr": ("learning rate", "lr"),
    "scale": ("loss scale", "scale"),
    "grad_norm": ("gradient norm (unscaled, before clipping)", "norm"),
    "tokens_per_s": ("throughput", "tokens/s"),
    "samples_per_s": ("throughput", "samples/s"),
    "step_time_ms": ("step time", "ms"),
    "mfu": ("model FLOPs utilisation", "MFU"),  # plotted when a row logs it
}

#: Settings that do not make two runs different experiments (a seed set shares the rest).
_NOT_A_SETTING = frozenset({"seed", "out", "overwrite", "resume", "allow_precision_change"})


@dataclass(frozen=True)
class Run:
    """One run folder (or one ``metrics.jsonl``).

    Attributes:
        label: how the run is named on the page (its folder name unless given).
        path: the folder (or file) it was read from.
        rows: the logged rows in step order, as written (non-finite numbers are None).
        summary: ``summary.json`` when the folder has one (an unfinished run has none).
    """

    label: str
    path: str
    rows: tuple[dict[str, Any], ...]
    summary: dict[str, Any] | None = None

    @property
    def steps(self) -> list[int]:
        """The step of each row."""
        return [int(r["step"]) for r in self.rows]

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """``(steps, values)`` of the rows that hold ``key`` (None, a non-finite value written
        as null, becomes NaN so a plot shows the gap)."""
        steps, values = [], []
        for row in self.rows:
            if key in row:
                value = row[key]
                steps.append(int(row["step"]))
                values.append(math.nan if value is None else float(value))
        return steps, values

    @property
    def keys(self) -> list[str]:
        """Every key some row holds, in first-seen order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    @property
    def skipped_steps(self) -> list[int]:
        """Steps whose row says the optimizer step was skipped (inf/NaN gradients)."""
        return [int(r["step"]) for r in self.rows if r.get("skipped")]

    @property
    def config(self) -> dict[str, Any]:
        """The run's settings from ``summary.json`` (empty without one)."""
        config = (self.summary or {}).get("config")
        return dict(config) if isinstance(config, dict) else {}

    @property
    def precision(self) -> str:
        """The precision the run trained in (``?`` when nothing says)."""
        summary = self.summary or {}
        return str(summary.get("precision") or self.config.get("precision") or "?")

    @property
    def seed(self) -> int | None:
        """The run's ``--seed`` when its summary records one."""
        seed = self.config.get("seed")
        return seed if isinstance(seed, int) else None

    @property
    def tokens_per_step(self) -> int | None:
        """Tokens of one optimizer step, from the recorded settings (for aligning by tokens)."""
        c = self.config
        try:
            world = int((self.summary or {}).get("world_size") or 1)
            return int(c["batch_size"]) * int(c["seq_len"]) * int(c.get("grad_accum", 1)) * world
        except (KeyError, TypeError, ValueError):
            return None

    def setting(self) -> str:
        """What makes this run an experiment of its own: its settings without the seed and
        the output folder (runs with the same setting form a seed set)."""
        config = {k: v for k, v in self.config.items() if k not in _NOT_A_SETTING}
        if not config:
            return f"run:{self.path}"  # no recorded settings: a set of its own
        return json.dumps(config, sort_keys=True, default=str)


@dataclass(frozen=True)
class RunGroup:
    """Runs of one setting (one run, or a seed set), named by the first run's label."""

    label: str
    runs: tuple[Run, ...] = field(default_factory=tuple)

    @property
    def precision(self) -> str:
        return self.runs[0].precision


def _metrics_file(path: Path) -> Path:
    if path.is_dir():
        return path / "metrics.jsonl"
    return path


def load_run(path: str | Path, label: str | None = None) -> Run:
    """Read one run: a folder written by ``ampkit train --out`` (or any folder holding a
    ``metrics.jsonl``), or a ``metrics.jsonl`` file itself.

    A torn last line (a run killed while writing) is left out; any other line that is not a
    JSON object stops the read.

    Raises:
        ConfigurationError: the path does not exist or holds no ``metrics.jsonl``
            (the message starts ``runs:``).
        DataError: a line of the file is damaged, or it holds no rows.
    """
    folder = Path(path)
    if not folder.exists():
        raise ConfigurationError(
            f"runs: {folder} does not exist. Pass a run folder (ampkit train --out DIR) or its "
            "metrics.jsonl.",
        )
    metrics = _metrics_file(folder)
    if not metrics.is_file():
        raise ConfigurationError(
            f"runs: {folder} holds no metrics.jsonl. Pass a folder written by "
            "`ampkit train --out DIR` (or a Trainer's LoggingConfig(metrics_file=...)).",
        )
    lines = metrics.read_text(encoding="utf-8").split("\n")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if number >= len(lines) - 1:  # the last row, cut short by a kill
                continue
            raise DataError(
                f"runs: line {number} of {metrics} is not JSON. Only a torn last line is "
                "skipped; repair or remove the line."
            ) from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise DataError(
                f"runs: line {number} of {metrics} is not a metrics row (a JSON object with an "
                "integer 'step'). Pass the metrics.jsonl of an ampkit run."
            )
        rows.append(row)
    if not rows:
        raise DataError(f"runs: {metrics} holds no rows yet. Report it after a step was logged.")
    rows.sort(key=lambda r: r["step"])
    summary = None
    summary_path = metrics.parent / "summary.json"
    if summary_path.is_file():
        try:
            loaded = json.loads(summary_path.read_text(encoding="utf-8"))
        except ValueError:
            raise DataError(
                f"runs: {summary_path} is not JSON. Remove it to report the metrics alone."
            ) from None
        summary = loaded if isinstance(loaded, dict) else None
    name = label or (folder.name if folder.is_dir() else folder.parent.name) or str(folder)
    return Run(label=name, path=str(folder), rows=tuple(rows), summary=summary)


def group_runs(runs: Sequence[Run]) -> list[RunGroup]:
    """Runs gathered by setting, in the order each setting first appears: ``fp32-s0 fp32-s1
    bf16-s0 bf16-s1`` are two seed sets of two runs each."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.setting(), []).append(run)
    result = []
    for members in groups.values():
        label = members[0].label if len(members) == 1 else _common_label(members)
        result.append(RunGroup(label=label, runs=tuple(members)))
    return result


def _common_label(runs: Sequence[Run]) -> str:
    """``fp32 (3 seeds)``: the precision when the runs share it, else the first label."""
    labels = {r.precision for r in runs}
    name = labels.pop() if len(labels) == 1 else runs[0].label
    return f"{name} ({len(runs)} seeds)"

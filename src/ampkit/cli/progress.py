"""Progress of a long-running command on stderr: the renderer of the library's ``progress``
callbacks (``progress(stage, done, total)``; the library itself prints nothing).

One tqdm bar at a time, in the house style of the Trainer's
:class:`~ampkit.trainer.callbacks.ProgressBar` (``leave=False``: it disappears when the command
is done, so the report stays as it was); a new stage replaces the bar. Nothing is drawn with
``--no-progress`` or when stderr is not a terminal (a pipe, a file, CI logs, click's test
runner), so output that is read by programs never holds a progress line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import click

__all__ = ["Progress", "progress_option"]


def progress_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--progress/--no-progress`` option (a ``progress`` keyword of the command)."""
    return click.option(
        "--progress/--no-progress",
        "progress",
        default=True,
        show_default=True,
        help="Show a progress bar on stderr (only when stderr is a terminal).",
    )(command)


class Progress:
    """A ``progress(stage, done, total)`` callback drawing a bar on ``stream``.

    Use it as a context manager so the last bar is closed, error or not.

    Args:
        enabled: False for ``--no-progress``.
        stream: where to draw (default: stderr at call time); nothing is drawn unless it is a
            terminal.
        unit: what is counted, per stage (a stage not listed counts ``"it"``).
        mininterval: least seconds between two redraws of the bar.
    """

    def __init__(
        self,
        enabled: bool = True,
        *,
        stream: TextIO | None = None,
        unit: dict[str, str] | None = None,
        mininterval: float = 0.1,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(enabled and callable(isatty) and isatty())
        self.units = dict(unit or {})
        self.mininterval = mininterval
        self._bar: Any = None
        self._stage: str | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if stage != self._stage or self._bar is None or self._bar.total != total:
            self.close()
            from tqdm import tqdm

            self._stage = stage
            self._bar = tqdm(
                total=total,
                desc=stage,
                unit=self.units.get(stage, "it"),
                file=self.stream,
                dynamic_ncols=True,
                leave=False,
                mininterval=self.mininterval,
            )
        self._bar.update(max(0, done - self._bar.n))

    def close(self) -> None:
        """Remove the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
        self._bar = None
        self._stage = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

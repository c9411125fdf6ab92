"""Lint many files: :func:`check_paths` (files and folders) and :func:`lint_files` (with --fix)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from ampkit.lint.check import check_file
from ampkit.lint.discovery import MAX_FILE_BYTES, SourceFile, discover
from ampkit.lint.findings import Finding
from ampkit.lint.fix import FileFix, fix_file
from ampkit.lint.selection import Selection

__all__ = ["LintRun", "check_paths", "lint_files", "process_file"]

_PARALLEL_MIN_FILES = 300


@dataclass
class LintRun:
    """The outcome of linting many files: findings (in file order), fixes written, notes,
    and the files ``--fix`` had to fix but could not write."""

    findings: list[Finding] = field(default_factory=list)
    fixed: int = 0
    notes: list[str] = field(default_factory=list)
    unfixed: int = 0


def check_paths(
    paths: Sequence[str | os.PathLike[str]],
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    exclude: Sequence[str] = (),
    max_bytes: int | None = MAX_FILE_BYTES,
) -> list[Finding]:
    """Lint files and folders (recursing into ``*.py``) and return all findings.

    Paths that are not regular files (FIFOs, devices, broken symlinks) are skipped; files over
    ``max_bytes`` (None: no limit) are one ``AMP000`` finding each.

    Raises:
        ConfigurationError: a path does not exist or a code in ``select``/``ignore`` is unknown.
    """
    selection = Selection.from_options(select, ignore)
    files, _ = discover(paths, exclude)
    return lint_files(files, selection, max_bytes=max_bytes).findings


def process_file(
    source: SourceFile,
    selection: Selection | None = None,
    fix: bool = False,
    max_bytes: int | None = MAX_FILE_BYTES,
) -> tuple[list[Finding], FileFix]:
    """Lint one file, first applying safe fixes in place when ``fix``.

    Returns the findings and what ``--fix`` did (fixes written, a note when it was refused).
    """
    done = fix_file(source.path, selection, source.root, max_bytes) if fix else FileFix()
    return check_file(source.path, selection, max_bytes=max_bytes), done


def _process(
    job: tuple[SourceFile, Selection | None, bool, int | None],
) -> tuple[list[Finding], FileFix]:
    return process_file(*job)


def lint_files(
    files: Sequence[Path | SourceFile],
    selection: Selection | None = None,
    fix: bool = False,
    jobs: int | None = None,
    max_bytes: int | None = MAX_FILE_BYTES,
) -> LintRun:
    """Lint many files, in worker processes when there are enough of them to pay off.

    A plain :class:`~pathlib.Path` counts as found in its own folder (``--fix`` writes no
    symlink that leaves it). Files over ``max_bytes`` (None: no limit) are not read.
    """
    sources = [f if isinstance(f, SourceFile) else SourceFile(f, f.parent) for f in files]
    cpus = os.cpu_count() or 1
    workers = jobs if jobs is not None else (min(cpus, 8) if cpus >= 4 else 1)
    jobs_list = [(source, selection, fix, max_bytes) for source in sources]
    if workers > 1 and len(sources) >= _PARALLEL_MIN_FILES:
        try:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(_process, jobs_list, chunksize=64))
        except (OSError, BrokenProcessPool):
            results = [_process(job) for job in jobs_list]
    else:
        results = [_process(job) for job in jobs_list]
    return LintRun(
        [f for found, _ in results for f in found],
        sum(done.count for _, done in results),
        [done.note for _, done in results if done.note is not None],
        sum(done.failed for _, done in results),
    )

"""Lint many files: :func:`check_paths` (files and folders) and :func:`lint_files` (with --fix)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ampkit.lint.check import check_file
from ampkit.lint.discovery import iter_python_files
from ampkit.lint.findings import Finding
from ampkit.lint.fix import fix_file
from ampkit.lint.selection import Selection

__all__ = ["check_paths", "lint_files", "process_file"]

_PARALLEL_MIN_FILES = 300


def check_paths(
    paths: Sequence[str | os.PathLike[str]],
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    exclude: Sequence[str] = (),
) -> list[Finding]:
    """Lint files and folders (recursing into ``*.py``) and return all findings.

    Raises:
        ConfigurationError: a path does not exist or a code in ``select``/``ignore`` is unknown.
    """
    selection = Selection.from_options(select, ignore)
    findings, _ = lint_files(list(iter_python_files(paths, exclude)), selection)
    return findings


def process_file(
    path: Path, selection: Selection | None = None, fix: bool = False
) -> tuple[list[Finding], int]:
    """Lint one file, first applying safe fixes in place when ``fix``; return findings and fix count."""
    fixed = fix_file(path, selection) if fix else 0
    return check_file(path, selection), fixed


def _process(job: tuple[Path, Selection | None, bool]) -> tuple[list[Finding], int]:
    return process_file(*job)


def lint_files(
    files: Sequence[Path],
    selection: Selection | None = None,
    fix: bool = False,
    jobs: int | None = None,
) -> tuple[list[Finding], int]:
    """Lint many files, in worker processes when there are enough of them to pay off.

    Returns all findings (in file order) and the number of fixes applied.
    """
    cpus = os.cpu_count() or 1
    workers = jobs if jobs is not None else (min(cpus, 8) if cpus >= 4 else 1)
    jobs_list = [(path, selection, fix) for path in files]
    if workers > 1 and len(files) >= _PARALLEL_MIN_FILES:
        try:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(_process, jobs_list, chunksize=64))
        except (OSError, BrokenProcessPool):
            results = [_process(job) for job in jobs_list]
    else:
        results = [_process(job) for job in jobs_list]
    findings = [f for found, _ in results for f in found]
    return findings, sum(count for _, count in results)

"""Lint many files: :func:`check_paths` (files and folders) and :func:`lint_files` (with --fix)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from ampkit.lint.check import check_file
from ampkit.lint.discovery import MAX_FILE_BYTES, SourceFile, discover, read_source
from ampkit.lint.findings import Finding
from ampkit.lint.fix import FileFix, fix_file
from ampkit.lint.project import ModuleSummary, ProjectIndex, module_name, summarise
from ampkit.lint.selection import Selection

__all__ = ["LintRun", "build_index", "check_paths", "lint_files", "process_file"]

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
    project: bool = True,
) -> list[Finding]:
    """Lint files and folders (recursing into ``*.py``) and return all findings.

    Paths that are not regular files (FIFOs, devices, broken symlinks) are skipped; files over
    ``max_bytes`` (None: no limit) are one ``AMP000`` finding each. With ``project``, what a
    file imports from the other linted files is followed (see :func:`lint_files`).

    Raises:
        ConfigurationError: a path does not exist or a code in ``select``/``ignore`` is unknown.
    """
    selection = Selection.from_options(select, ignore)
    files, _ = discover(paths, exclude)
    return lint_files(files, selection, max_bytes=max_bytes, project=project).findings


def process_file(
    source: SourceFile,
    selection: Selection | None = None,
    fix: bool = False,
    max_bytes: int | None = MAX_FILE_BYTES,
    index: ProjectIndex | None = None,
) -> tuple[list[Finding], FileFix]:
    """Lint one file, first applying safe fixes in place when ``fix``; ``index`` (the
    linted tree's :class:`~ampkit.lint.project.ProjectIndex`) resolves what it imports
    from the tree's other files.

    Returns the findings and what ``--fix`` did (fixes written, a note when it was refused).
    """
    done = fix_file(source.path, selection, source.root, max_bytes) if fix else FileFix()
    view = None
    if index is not None:
        view = index.view(source.path, module_name(source.path, source.root))
    return check_file(source.path, selection, max_bytes=max_bytes, project=view), done


#: the project index of the run, in a worker process (set by :func:`_init_worker`)
_WORKER_INDEX: list[ProjectIndex | None] = [None]


def _init_worker(index: ProjectIndex | None) -> None:
    _WORKER_INDEX[0] = index


def _process(
    job: tuple[SourceFile, Selection | None, bool, int | None],
) -> tuple[list[Finding], FileFix]:
    return process_file(*job, index=_WORKER_INDEX[0])


def _summarise(
    job: tuple[SourceFile, int | None],
) -> tuple[str, str, ModuleSummary] | None:
    source, max_bytes = job
    try:
        text, _ = read_source(source.path, max_bytes)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
        return None  # reported as AMP000 by the analysis
    summary = summarise(text)
    if summary is None:
        return None
    return module_name(source.path, source.root), str(source.path), summary


def build_index(
    files: Sequence[Path | SourceFile],
    max_bytes: int | None = MAX_FILE_BYTES,
    jobs: int | None = None,
) -> ProjectIndex:
    """The :class:`~ampkit.lint.project.ProjectIndex` of a tree: every file summarised once
    (in worker processes when there are enough files), then collected in path order, so the
    index is the same whatever the order of ``files`` or the number of processes."""
    sources = [f if isinstance(f, SourceFile) else SourceFile(f, f.parent) for f in files]
    work = [(source, max_bytes) for source in sources]
    workers = _workers(jobs)
    results: list[tuple[str, str, ModuleSummary] | None]
    if workers > 1 and len(sources) >= _PARALLEL_MIN_FILES:
        try:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(_summarise, work, chunksize=64))
        except (OSError, BrokenProcessPool):
            results = [_summarise(job) for job in work]
    else:
        results = [_summarise(job) for job in work]
    return ProjectIndex([r for r in results if r is not None])


def _workers(jobs: int | None) -> int:
    cpus = os.cpu_count() or 1
    return jobs if jobs is not None else (min(cpus, 8) if cpus >= 4 else 1)


def lint_files(
    files: Sequence[Path | SourceFile],
    selection: Selection | None = None,
    fix: bool = False,
    jobs: int | None = None,
    max_bytes: int | None = MAX_FILE_BYTES,
    project: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> LintRun:
    """Lint many files, in worker processes when there are enough of them to pay off.

    A plain :class:`~pathlib.Path` counts as found in its own folder (``--fix`` writes no
    symlink that leaves it). Files over ``max_bytes`` (None: no limit) are not read. With
    ``project`` (and more than one file), names a file imports from the other files are
    resolved through a :class:`~ampkit.lint.project.ProjectIndex` built once for the run
    (:func:`build_index`); each file's findings are still its own. ``progress`` is called
    as ``progress("files", done, total)`` before the first file and after each one.
    """
    sources = [f if isinstance(f, SourceFile) else SourceFile(f, f.parent) for f in files]
    workers = _workers(jobs)
    index = build_index(sources, max_bytes, jobs) if project and len(sources) > 1 else None
    jobs_list = [(source, selection, fix, max_bytes) for source in sources]

    def counted(
        items: Iterable[tuple[list[Finding], FileFix]],
    ) -> list[tuple[list[Finding], FileFix]]:
        done: list[tuple[list[Finding], FileFix]] = []
        if progress is not None:
            progress("files", 0, len(jobs_list))
        for item in items:
            done.append(item)
            if progress is not None:
                progress("files", len(done), len(jobs_list))
        return done

    if workers > 1 and len(sources) >= _PARALLEL_MIN_FILES:
        try:
            with ProcessPoolExecutor(
                max_workers=workers, initializer=_init_worker, initargs=(index,)
            ) as pool:
                results = counted(pool.map(_process, jobs_list, chunksize=64))
        except (OSError, BrokenProcessPool):
            results = counted(process_file(*job, index=index) for job in jobs_list)
    else:
        results = counted(process_file(*job, index=index) for job in jobs_list)
    return LintRun(
        [f for found, _ in results for f in found],
        sum(done.count for _, done in results),
        [done.note for _, done in results if done.note is not None],
        sum(done.failed for _, done in results),
    )

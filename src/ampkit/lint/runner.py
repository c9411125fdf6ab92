"""Run the rules: parse a source, select codes, honour ``# ampkit: noqa``, walk folders."""

from __future__ import annotations

import ast
import codecs
import fnmatch
import io
import os
import re
import tokenize
import warnings
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from ampkit.errors import ConfigurationError
from ampkit.lint.analysis import FileAnalysis
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.rules import RULES, all_rules
from ampkit.lint.source import SourceText, noqa_map

__all__ = [
    "Selection",
    "check_file",
    "check_paths",
    "check_source",
    "iter_python_files",
    "lint_files",
    "process_file",
    "read_source",
]

_PARALLEL_MIN_FILES = 300

#: Folders never entered when walking a directory (explicitly named files are always linted).
EXCLUDED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "node_modules",
     ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "build", "dist", "site-packages"}
)  # fmt: skip


@dataclass(frozen=True)
class Selection:
    """Which codes run: ``select`` (default: all) minus ``ignore``; prefixes like ``AMP01`` work."""

    codes: frozenset[str]

    @classmethod
    def from_options(
        cls, select: Iterable[str] | None = None, ignore: Iterable[str] | None = None
    ) -> Selection:
        """Build a selection from ``--select``/``--ignore`` values (comma-separated allowed).

        Raises:
            ConfigurationError: a value matches no rule code.
        """
        chosen = _expand(select) if select is not None and _split(select) else set(RULES)
        return cls(frozenset(chosen - _expand(ignore or ())))

    def __contains__(self, code: object) -> bool:
        return code in self.codes


def _split(values: Iterable[str]) -> list[str]:
    return [part.strip().upper() for value in values for part in value.split(",") if part.strip()]


def _expand(values: Iterable[str]) -> set[str]:
    codes: set[str] = set()
    for value in _split(values):
        if value in ("ALL", "AMP"):
            codes |= set(RULES)
            continue
        matched = {code for code in RULES if code.startswith(value)}
        if not matched:
            raise ConfigurationError(
                f"unknown rule code {value!r}; known codes are {', '.join(sorted(RULES))} "
                "(or a prefix such as AMP00); run `ampkit lint --explain CODE` to see one"
            )
        codes |= matched
    return codes


#: A file mentioning none of these cannot trigger any rule, so only its syntax is checked.
_RELEVANT = re.compile(
    r"torch|scaler|backward|autocast|clip_grad|unscale_|half|bfloat16|float16|\.step\b|zero_grad|state_dict"
)


def _syntax_finding(path: str, exc: BaseException, line: int = 1, column: int = 1) -> Finding:
    return Finding(
        path, max(line, 1), max(column, 1), "AMP000", Severity.ERROR, f"file not checked: {exc}"
    )


def analyse(text: str, path: str = "<string>") -> tuple[list[Finding], FileAnalysis | None]:
    """All findings of all rules for a source text (no selection or noqa applied yet)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        message = f"syntax error: {exc.msg}"
        return [_syntax_finding(path, Exception(message), exc.lineno or 1, exc.offset or 1)], None
    except (ValueError, RecursionError, MemoryError) as exc:
        return [
            _syntax_finding(path, Exception(f"cannot parse: {type(exc).__name__}: {exc}"))
        ], None
    if not _RELEVANT.search(text):
        return [], None
    try:
        analysis = FileAnalysis(tree, SourceText(text), path)
        findings: list[Finding] = []
        for rule_cls in all_rules():
            findings.extend(rule_cls().check(analysis))
    except RecursionError:
        return [_syntax_finding(path, Exception("code nested too deeply to analyse"))], None
    return findings, analysis


def _filter(findings: Iterable[Finding], text: str, selection: Selection | None) -> list[Finding]:
    noqa = noqa_map(text)
    kept: dict[tuple[str, int, int, str], Finding] = {}
    for finding in findings:
        if selection is not None and finding.code not in selection:
            continue
        if finding.line in noqa:
            codes = noqa[finding.line]
            if codes is None or finding.code in codes:
                continue
        kept.setdefault(finding.sort_key, finding)
    return sorted(kept.values(), key=lambda f: f.sort_key)


def check_source(
    text: str, path: str = "<string>", selection: Selection | None = None
) -> list[Finding]:
    """Lint one Python source text and return its findings sorted by position.

    Never raises for bad input: a text that does not parse is one ``AMP000`` finding.

    Example::

        >>> from ampkit.lint import check_source
        >>> [f.code for f in check_source("import torch\\nwith torch.autocast('cpu', dtype=torch.float16):\\n    pass\\n")]
        ['AMP009']
    """
    findings, _ = analyse(text, path)
    return _filter(findings, text, selection)


def read_source(path: Path) -> tuple[str, str]:
    """Read a Python file honouring its encoding declaration (PEP 263), keeping line endings.

    Returns the text and the encoding (needed to write a fixed file back unchanged elsewhere).
    """
    data = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    if encoding == "utf-8-sig" and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
        encoding = "utf-8"
    return data.decode(encoding), encoding


def check_file(
    path: Path, selection: Selection | None = None, display: str | None = None
) -> list[Finding]:
    """Lint one file; unreadable or undecodable files are one ``AMP000`` finding."""
    name = display or str(path)
    try:
        text, _ = read_source(path)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as exc:
        found = [_syntax_finding(name, Exception(f"cannot read: {exc}"))]
        return [f for f in found if selection is None or f.code in selection]
    return check_source(text, name, selection)


def _excluded(path: Path, patterns: Sequence[str]) -> bool:
    """Whether ``path`` (its name or its ``/``-separated path) matches an exclude pattern."""
    if not patterns:
        return False
    text = path.as_posix()
    return any(
        fnmatch.fnmatch(path.name, p) or fnmatch.fnmatch(text, p) or fnmatch.fnmatch(text, f"*/{p}")
        for p in patterns
    )


def iter_python_files(
    paths: Sequence[str | os.PathLike[str]], exclude: Sequence[str] = ()
) -> Iterator[Path]:
    """The files to lint: named files as given, folders searched for ``*.py`` (sorted).

    ``exclude`` holds glob patterns (``legacy/*``, ``*_pb2.py``) matched against names and
    paths; they apply to named files too, so pre-commit runs honour them.

    Raises:
        ConfigurationError: a path does not exist.
    """
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if not _excluded(path, exclude):
                yield path
        elif path.is_dir():
            for root, dirs, files in os.walk(path):
                base = Path(root)
                dirs[:] = sorted(
                    d
                    for d in dirs
                    if d not in EXCLUDED_DIRS
                    and not d.startswith(".")
                    and not _excluded(base / d, exclude)
                )
                for name in sorted(files):
                    if name.endswith(".py") and not _excluded(base / name, exclude):
                        yield base / name
        else:
            raise ConfigurationError(
                f"path {str(raw)!r} does not exist; "
                "pass existing .py files or folders to `ampkit lint`"
            )


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
    fixed = 0
    if fix:
        from ampkit.lint.fix import fix_file

        fixed = fix_file(path, selection)
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

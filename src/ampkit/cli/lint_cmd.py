"""``ampkit lint``: find mixed-precision mistakes in PyTorch code without running it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ampkit.cli.progress import progress_option
from ampkit.errors import ConfigurationError

if TYPE_CHECKING:
    from ampkit.lint.selection import Selection

__all__ = ["lint"]

PROGRESS_FILES = 20
"""``ampkit lint`` shows a progress bar (on a terminal) over more files than this."""


def _explain(code: str) -> None:
    from ampkit.lint.rules import RULES

    rule = RULES.get(code.strip().upper())
    if rule is None:
        raise ConfigurationError(
            f"unknown rule code {code!r} for --explain; known codes are {', '.join(sorted(RULES))}"
        )
    click.echo(rule.explain())


@click.command("lint", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "sarif", "github"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--select",
    multiple=True,
    metavar="CODES",
    help="Only these codes (comma-separated, prefixes ok).",
)
@click.option(
    "--ignore",
    multiple=True,
    metavar="CODES",
    help="Skip these codes (comma-separated, prefixes ok).",
)
@click.option(
    "--exclude",
    multiple=True,
    metavar="GLOB",
    help="Skip files and folders matching this pattern (repeatable).",
)
@click.option(
    "--fix",
    is_flag=True,
    help="Rewrite what is safe to rewrite (deprecated API), then report the rest.",
)
@click.option("--diff", is_flag=True, help="Print what --fix would change; write nothing.")
@click.option(
    "--max-file-size",
    "max_file_mb",
    type=click.FloatRange(min=0),
    default=None,
    metavar="MB",
    help="Files larger than this are not analysed (one AMP000 each). [default: 5; 0: no limit]",
)
@click.option(
    "--no-project",
    is_flag=True,
    help="Analyse each file alone: do not follow imports between the linted files.",
)
@click.option("--exit-zero", is_flag=True, help="Exit with 0 even when findings fail the run.")
@click.option("--isolated", is_flag=True, help="Ignore [tool.ampkit.lint] in pyproject.toml.")
@click.option("--explain", metavar="CODE", help="Print the documentation of one rule and exit.")
@progress_option
@click.pass_context
def lint(
    ctx: click.Context,
    paths: tuple[str, ...],
    fmt: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    exclude: tuple[str, ...],
    fix: bool,
    diff: bool,
    max_file_mb: float | None,
    no_project: bool,
    exit_zero: bool,
    isolated: bool,
    explain: str | None,
    progress: bool,
) -> None:
    """Check PATHS (files, or folders searched for *.py; default: .) for AMP mistakes.

    Prints one line per finding, `path:line:col: CODE message`. Exit status: 0 when no
    finding is a warning or error, 1 when one is (an unreadable or oversized file is an
    AMP000 error) or when --fix could not write a file it had to fix (read-only), 2 on a
    usage error. Silence one line with
    `# ampkit: noqa` or `# ampkit: noqa: AMP001`. Defaults for --select/--ignore/--exclude
    come from [tool.ampkit.lint] in the nearest pyproject.toml.

    \b
    Examples:
      ampkit lint train.py                    # one file
      ampkit lint src/ --select AMP001,AMP002 # only these rules
      ampkit lint . --fix                     # migrate torch.cuda.amp -> torch.amp
      ampkit lint . --diff                    # show that migration without writing
      ampkit lint . --format sarif > lint.sarif
      ampkit lint --explain AMP001            # rationale and examples of a rule
    """
    # AmpkitErrors (usage mistakes) are rendered by the ampkit command group: one line, exit 2.
    if explain is not None:
        _explain(explain)
        return
    if fix and diff:
        raise ConfigurationError("--fix and --diff cannot be combined; pass one of them")
    failed = _run(
        paths or (".",),
        fmt,
        select,
        ignore,
        exclude,
        fix,
        diff,
        isolated,
        max_file_mb,
        no_project,
        progress,
    )
    ctx.exit(0 if exit_zero or not failed else 1)


def _run(
    paths: tuple[str, ...],
    fmt: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    exclude: tuple[str, ...],
    fix: bool,
    diff: bool,
    isolated: bool,
    max_file_mb: float | None = None,
    no_project: bool = False,
    progress: bool = True,
) -> bool:
    """Lint (and fix) the paths, print the report; return whether the run failed. A progress
    bar is drawn on stderr (a terminal only) over more than :data:`PROGRESS_FILES` files."""
    from ampkit.cli.progress import Progress
    from ampkit.lint.api import lint_files
    from ampkit.lint.config import LintConfig, load_config
    from ampkit.lint.discovery import MAX_FILE_BYTES, discover
    from ampkit.lint.report import format_findings
    from ampkit.lint.selection import Selection

    config = LintConfig() if isolated else load_config()
    chosen = select if select else config.select
    selection = Selection.from_options(chosen, (*config.ignore, *ignore))
    size_mb = max_file_mb if max_file_mb is not None else config.max_file_mb
    max_bytes = MAX_FILE_BYTES if size_mb is None else (int(size_mb * 1e6) or None)
    files, skipped = discover(paths, (*config.exclude, *exclude))
    for item in skipped:
        click.echo(f"note: {item.note}", err=True)
    if diff:
        return _diff([f.path for f in files], selection, max_bytes)
    with Progress(progress and len(files) > PROGRESS_FILES, unit={"files": "file"}) as bar:
        run = lint_files(
            files, selection, fix=fix, max_bytes=max_bytes, project=not no_project, progress=bar
        )
    for note in run.notes:
        click.echo(f"note: {note}", err=True)
    findings, fixed = run.findings, run.fixed
    click.echo(format_findings(findings, fmt), nl=False)
    if fmt == "text":
        fixable = sum(1 for f in findings if f.fix is not None)
        summary = f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''}"
        if fixed:
            summary += f" ({fixed} fixed)"
        if fixable:
            summary += f"; {fixable} fixable with --fix"
        if findings or fixed:
            click.echo(summary + ".", err=True)
    return bool(run.unfixed) or any(f.severity.fails for f in findings)


def _diff(files: list[Path], selection: Selection, max_bytes: int | None) -> bool:
    """Print a unified diff of the safe fixes; return whether there is any."""
    import difflib

    from ampkit.lint.discovery import read_source
    from ampkit.lint.fix import fix_source

    changed = 0
    for path in files:
        try:
            text, _ = read_source(path, max_bytes)
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
            continue
        new, _ = fix_source(text, str(path), selection)
        if new != text:
            changed += 1
            click.echo(
                "".join(
                    difflib.unified_diff(
                        text.splitlines(keepends=True),
                        new.splitlines(keepends=True),
                        fromfile=f"a/{path.as_posix()}",
                        tofile=f"b/{path.as_posix()}",
                    )
                ),
                nl=False,
            )
    if changed:
        click.echo(f"Would fix {changed} file{'s' if changed != 1 else ''}.", err=True)
    return bool(changed)

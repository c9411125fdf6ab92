"""``ampkit lint``: find mixed-precision mistakes in PyTorch code without running it."""

from __future__ import annotations

import click

from ampkit.errors import AmpkitError

__all__ = ["lint"]


def _explain(code: str) -> None:
    from ampkit.errors import ConfigurationError
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
    "--fix",
    is_flag=True,
    help="Rewrite what is safe to rewrite (deprecated API), then report the rest.",
)
@click.option("--exit-zero", is_flag=True, help="Exit with 0 even when findings fail the run.")
@click.option("--explain", metavar="CODE", help="Print the documentation of one rule and exit.")
@click.pass_context
def lint(
    ctx: click.Context,
    paths: tuple[str, ...],
    fmt: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    fix: bool,
    exit_zero: bool,
    explain: str | None,
) -> None:
    """Check PATHS (files, or folders searched for *.py; default: .) for AMP mistakes.

    Prints one line per finding, `path:line:col: CODE message`. Exit status: 0 when no
    finding is a warning or error, 1 when one is, 2 on a usage error. Silence one line with
    `# ampkit: noqa` or `# ampkit: noqa: AMP001`.

    \b
    Examples:
      ampkit lint train.py                    # one file
      ampkit lint src/ --select AMP001,AMP002 # only these rules
      ampkit lint . --fix                     # migrate torch.cuda.amp -> torch.amp
      ampkit lint . --format sarif > lint.sarif
      ampkit lint --explain AMP001            # rationale and examples of a rule
    """
    try:
        if explain is not None:
            _explain(explain)
            return
        failed = _run(paths or (".",), fmt, select, ignore, fix)
    except AmpkitError as exc:
        click.echo(f"ampkit: error: {exc}", err=True)
        ctx.exit(exc.exit_code)
        return
    ctx.exit(0 if exit_zero or not failed else 1)


def _run(
    paths: tuple[str, ...], fmt: str, select: tuple[str, ...], ignore: tuple[str, ...], fix: bool
) -> bool:
    from ampkit.lint.report import format_findings
    from ampkit.lint.runner import Selection, iter_python_files, lint_files

    selection = Selection.from_options(select, ignore)
    findings, fixed = lint_files(list(iter_python_files(paths)), selection, fix=fix)
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
    return any(f.severity.fails for f in findings)

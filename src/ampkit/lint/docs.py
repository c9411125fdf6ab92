"""Generate ``docs/lint.md`` from the rule docstrings (the single source of rule docs).

Regenerate after changing a rule: ``python -m ampkit.lint.docs docs/lint.md``.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

from ampkit.lint.rules import Rule, all_rules

__all__ = ["rule_examples", "rules_markdown"]

_HEADER = """# `ampkit lint`

`ampkit lint` finds mixed-precision (AMP) mistakes in PyTorch training code by reading it
(static analysis with Python's `ast`; nothing is imported or run, torch is not needed).

```console
$ ampkit lint train.py src/
train.py:41:9: AMP001 gradients are clipped while still scaled by the GradScaler; call scaler.unscale_(optimizer) before clipping
$ ampkit lint . --fix                 # migrate torch.cuda.amp -> torch.amp
$ ampkit lint . --format sarif > lint.sarif
$ ampkit lint --explain AMP001
```

* Formats: `text` (default, `path:line:col: CODE message`), `json`, `sarif` (2.1.0), `github`.
* Exit status: 0 when no finding is a warning or error, 1 when one is, 2 on a usage error.
* `--select` / `--ignore` take codes or prefixes (`AMP00`), comma-separated or repeated.
* `# ampkit: noqa` silences every finding on its line, `# ampkit: noqa: AMP001,AMP006` only those.
* `--fix` applies the safe rewrites (the deprecated API migration) and leaves the rest as is;
  `--diff` prints what `--fix` would change without writing.
* `--exclude GLOB` skips matching files and folders (`.git`, `.venv`, `build`, ... always are).
* Defaults live in the nearest `pyproject.toml` (`--isolated` ignores it):

  ```toml
  [tool.ampkit.lint]
  select = ["AMP0"]        # codes or prefixes; --select replaces this
  ignore = ["AMP012"]      # --ignore adds to this
  exclude = ["legacy/*"]   # --exclude adds to this
  ```
* A file that does not parse is reported once as `AMP000`; the run goes on.
* Python API: `ampkit.lint.check_source(text, path)` and `ampkit.lint.check_paths(paths)`.

## pre-commit

The repository ships a hook definition (`.pre-commit-hooks.yaml`, hooks `ampkit-lint` and
`ampkit-lint-fix`). Point `repo` at wherever you get ampkit from:

```yaml
repos:
  - repo: <URL of the ampkit git repository>
    rev: v0.1.0
    hooks:
      - id: ampkit-lint
```

or, with ampkit already installed in the environment:

```yaml
repos:
  - repo: local
    hooks:
      - id: ampkit-lint
        name: ampkit lint
        entry: ampkit lint
        language: system
        types: [python]
```

## Rules

| code | severity | name | finds |
|------|----------|------|-------|
"""


def rule_examples(rule: type[Rule]) -> list[tuple[str, str]]:
    """The literal blocks of a rule's docstring as ``(label, code)``: ``("Bad", "...")``.

    These are the examples ``--explain`` prints and ``docs/lint.md`` shows; the test suite
    runs every one of them through the linter.
    """
    lines = inspect.cleandoc(rule.__doc__ or "").splitlines()
    found: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not (line.rstrip().endswith("::") and not line.startswith(" ")):
            continue
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
            body.append(lines[i][4:])
            i += 1
        found.append((line.rstrip()[:-2], "\n".join(body).strip("\n") + "\n"))
    return found


def _rst_to_md(text: str) -> str:
    """Turn the ``Bad::``/``Good::`` literal blocks of a docstring into fenced code."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and not line.startswith(" "):
            out.append(f"**{line.rstrip()[:-2]}:**")
            out.append("")
            out.append("```python")
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
                out.append(lines[i][4:])
                i += 1
            while out and not out[-1].strip():
                out.pop()
            out.append("```")
            out.append("")
            continue
        out.append(re.sub(r"``([^`]+)``", r"`\1`", line))
        i += 1
    return "\n".join(out).rstrip() + "\n"


def rules_markdown() -> str:
    """The full text of ``docs/lint.md``."""
    rules = all_rules()
    parts = [_HEADER]
    for rule in rules:
        summary = rule.summary.replace("|", "\\|")
        parts.append(
            f"| [{rule.code}](#{rule.code.lower()}) | {rule.severity.value} | `{rule.name}` | {summary} |\n"
        )
    for rule in rules:
        parts.append(f"\n### {rule.code}\n\n")
        parts.append(f"`{rule.name}`, severity **{rule.severity.value}**. {rule.summary}\n\n")
        parts.append(_rst_to_md(inspect.cleandoc(rule.__doc__ or "")))
    return "".join(parts)


def main(argv: list[str]) -> int:
    """Write the docs page to the path given as the only argument."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m ampkit.lint.docs docs/lint.md")
    Path(argv[0]).write_text(rules_markdown(), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))

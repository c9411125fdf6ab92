"""How right ``ampkit lint`` is on public commits that fixed an AMP bug: before and after.

The repositories are not part of this project. ``benchmarks/lint_history.json`` holds only
facts about them: for each fix the repository, the commit that fixed it, the file, the line
of the bug in the file *before* the commit (its first parent), the rule that claims that
kind of bug, a ``held_out`` flag and a one-sentence reason reached by reading the diff.

Each file is linted the way ``ampkit lint .`` lints it in its repository: the repository's
Python files at the commit (``commit^`` before, ``commit`` after) are read from git into a
temporary folder (nothing is run) and the file is linted with that tree's project index, so
what it imports from the tree, and the tree's configs and scalers, are followed. With
``--alone`` each file is linted by itself instead, as ``ampkit lint FILE`` would (the figure
of earlier rounds). A fix is judged inside its *scope*: the innermost function or
method holding the bug line before the fix (the module when the line is at top level), and
the function of the same qualified name after it (the whole file when it is gone).

* true positive: the expected rule is reported in the scope before the fix (at any
  severity, so a rule whose severity changes is scored the same way before and after);
* false negative: it is not;
* false positive: any other behavioural finding in the scope before the fix, and any
  behavioural finding in the scope after it (the fixed finding still reported counts here,
  and is listed apart); behavioural means every code except AMP000 and AMP006, and ``info``
  findings other than the expected rule are listed, not scored, as in ``lint_real.py``;
* a finding that is the expected one of another fix of the same commit and file (two bugs
  fixed in one scope) is that fix's, counted neither way here;
* a finding the data file lists under ``also_before`` / ``also_after`` (``[line, rule]``) is
  another real AMP bug judged by reading that scope (the commit did not fix it): it is
  counted neither way, and listed.

precision = TP / (TP + FP), recall = TP / (TP + FN), for all fixes, and for the
``held_out`` ones alone (kept aside, unseen, while the rules were changed). A held-out fix
marked ``spent`` had its unseen result reported and was studied afterwards: it is scored
in a part of its own ("held out before, then studied") and no longer in the held-out one,
which is always the part nobody has looked at.

Usage (the snapshots: one git directory per repository, named ``owner+name``, a bare clone
or a working clone, with the fix commits in their history)::

    python benchmarks/lint_history.py clone SNAPSHOTS --source https://github.com/{repo}.git
    python benchmarks/lint_history.py score SNAPSHOTS
    python benchmarks/lint_history.py score SNAPSHOTS --alone
    python benchmarks/lint_history.py score SNAPSHOTS --held-out --min-precision 0.9 --min-recall 0.8
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ampkit.lint import check_source
from ampkit.lint.api import build_index, process_file
from ampkit.lint.discovery import SourceFile
from ampkit.lint.findings import Finding, Severity

DATA = Path(__file__).with_name("lint_history.json")
NOT_BEHAVIOURAL = ("AMP000", "AMP006")


@dataclass(frozen=True)
class Fix:
    """One commit that fixed one AMP bug in one file."""

    repo: str
    commit: str
    path: str
    line: int
    rule: str
    held_out: bool
    also_before: frozenset[tuple[int, str]] = frozenset()
    also_after: frozenset[tuple[int, str]] = frozenset()
    #: held out once, its unseen result reported, then studied: no longer unseen
    spent: bool = False

    @property
    def folder(self) -> str:
        """The snapshot folder name: ``owner+name``."""
        return self.repo.replace("/", "+")

    @property
    def key(self) -> str:
        """How the fix is named in the report."""
        return f"{self.repo}@{self.commit[:10]} {self.path}:{self.line} {self.rule}"


def load(path: Path) -> list[Fix]:
    """The fixes of the data file, checked for shape."""
    data = json.loads(path.read_text(encoding="utf-8"))
    fixes: list[Fix] = []
    seen: set[tuple[str, str, str, int]] = set()
    for entry in data["fixes"]:
        fix = Fix(
            entry["repo"],
            entry["commit"],
            entry["path"],
            int(entry["line"]),
            entry["rule"],
            bool(entry["held_out"]),
            frozenset((int(n), str(c)) for n, c in entry.get("also_before", ())),
            frozenset((int(n), str(c)) for n, c in entry.get("also_after", ())),
            bool(entry.get("spent", False)),
        )
        if len(fix.commit) != 40:
            raise SystemExit(f"a fix needs the full 40-hex commit: {entry}")
        ident = (fix.repo, fix.commit, fix.path, fix.line)
        if ident in seen:
            raise SystemExit(f"two entries for {ident}")
        seen.add(ident)
        fixes.append(fix)
    return fixes


def clone(root: Path, fixes: list[Fix], source: str) -> None:
    """Bare-clone each repository of the data file into ``root/owner+name``."""
    root.mkdir(parents=True, exist_ok=True)
    for repo in sorted({f.repo for f in fixes}):
        dest = root / repo.replace("/", "+")
        if not dest.exists():
            url = source.format(repo=repo, folder=dest.name)
            subprocess.run(["git", "clone", "--quiet", "--bare", url, str(dest)], check=True)
            print(f"{dest.name}: cloned", file=sys.stderr)


def _git_dir(root: Path, fix: Fix) -> Path:
    base = root / fix.folder
    for candidate in (base / ".git", base / "repo", base / "repo" / ".git", base):
        if (candidate / "HEAD").exists() or (candidate / "HEAD").is_symlink():
            return candidate
    raise SystemExit(f"no snapshot of {fix.repo} under {root}; run the clone command first")


def _blob(git_dir: Path, rev: str, path: str) -> str | None:
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{rev}:{path}"],
        capture_output=True,
        text=True,
        errors="replace",
    )
    return done.stdout if done.returncode == 0 else None


@contextmanager
def _tree(git_dir: Path, rev: str) -> Iterator[Path]:
    """The repository's ``*.py`` files at ``rev``, written under a temporary folder (read
    blob by blob: a snapshot may lack its largest non-Python files)."""
    git = ["git", "--git-dir", str(git_dir)]
    listing = subprocess.run(
        [*git, "ls-tree", "-r", "-z", rev], capture_output=True, check=True
    ).stdout.split(b"\0")
    blobs: list[tuple[str, str]] = []
    for row in filter(None, listing):
        meta, _, name = row.partition(b"\t")
        mode, kind, sha = meta.split()
        path = name.decode("utf-8", "replace")
        if kind == b"blob" and mode != b"120000" and path.endswith(".py"):
            blobs.append((sha.decode(), path))
    with tempfile.TemporaryDirectory(prefix="lint-history-") as folder:
        root = Path(folder)
        batch = subprocess.run(
            [*git, "cat-file", "--batch"],
            input="".join(f"{sha}\n" for sha, _ in blobs).encode(),
            capture_output=True,
            check=True,
        ).stdout
        at = 0
        for _, path in blobs:
            header_end = batch.index(b"\n", at)
            header = batch[at:header_end].split()
            at = header_end + 1
            if header[-1] == b"missing":
                continue
            size = int(header[2])
            target = root / path
            if root not in target.resolve().parents:
                raise SystemExit(f"{rev}: a path leaves the tree: {path}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(batch[at : at + size])
            at += size + 1
        yield root


@functools.cache
def _findings(git_dir: Path, rev: str, path: str, alone: bool) -> tuple[Finding, ...]:
    """The findings of ``path`` at ``rev``: linted with its tree's project index, or by
    itself when ``alone`` (each (revision, file) is linted once per run)."""
    if alone:
        text = _blob(git_dir, rev, path)
        return tuple(check_source(text, path)) if text is not None else ()
    with _tree(git_dir, rev) as root:
        files = [SourceFile(p, root) for p in sorted(root.rglob("*.py")) if p.is_file()]
        index = build_index(files, jobs=1)
        return tuple(process_file(SourceFile(root / path, root), index=index)[0])


def _scopes(text: str) -> list[tuple[str, int, int]]:
    """Every function's qualified name and line span, outermost first."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((name, child.lineno, child.end_lineno or child.lineno))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return found  # (the linter reports AMP000 for it: the fix is scored on the module)
    visit(tree, "")
    return found


def _scope_at(text: str, line: int) -> tuple[str, int, int]:
    """The innermost function holding ``line`` (``("", 1, n)``: the module)."""
    best = ("", 1, len(text.splitlines()) or 1)
    for name, start, end in _scopes(text):
        if start <= line <= end and end - start <= best[2] - best[1]:
            best = (name, start, end)
    return best


def _scope_named(text: str, name: str) -> tuple[str, int, int]:
    whole = ("", 1, len(text.splitlines()) or 1)
    if not name:
        return whole
    return next((s for s in _scopes(text) if s[0] == name), whole)


def _in(findings: list[Finding], span: tuple[str, int, int]) -> list[Finding]:
    return [f for f in findings if span[1] <= f.line <= span[2]]


def _scored(findings: list[Finding], expected: str) -> list[Finding]:
    return [
        f
        for f in findings
        if f.code not in NOT_BEHAVIOURAL and (f.severity is not Severity.INFO or f.code == expected)
    ]


@dataclass
class Score:
    """The measurement (see the module docstring)."""

    fixes: int
    repositories: int
    commits: int
    true_positives: list[str] = field(default_factory=list)
    false_negatives: list[str] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)
    still_reported_after: list[str] = field(default_factory=list)
    other_real_bugs: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        """TP / (TP + FP)."""
        right, wrong = len(self.true_positives), len(self.false_positives)
        return right / (right + wrong) if right or wrong else 1.0

    @property
    def recall(self) -> float:
        """TP / (TP + FN)."""
        right, missed = len(self.true_positives), len(self.false_negatives)
        return right / (right + missed) if right or missed else 1.0

    def report(self, title: str) -> str:
        """The text ``score`` prints for one part of the set."""
        if not self.fixes:
            return f"{title}: no fixes\n"
        lines = [
            f"{title}: {self.fixes} fixes, {self.commits} commits, {self.repositories} repositories",
            f"  found before the fix: {len(self.true_positives)}, missed: "
            f"{len(self.false_negatives)}, false findings: {len(self.false_positives)} "
            f"(of them the fixed finding still reported after: {len(self.still_reported_after)}); "
            f"other real bugs reported (judged, not scored): {len(self.other_real_bugs)}",
            f"  precision {self.precision:.3f}  recall {self.recall:.3f}",
        ]
        lines += [f"    missed: {k}" for k in self.false_negatives]
        lines += [f"    false: {k}" for k in self.false_positives]
        return "\n".join(lines) + "\n"


def score(root: Path, fixes: list[Fix], alone: bool = False) -> Score:
    """Lint each fix's file before and after and compare (see the module docstring)."""
    result = Score(len(fixes), len({f.repo for f in fixes}), len({f.commit for f in fixes}))
    for fix in fixes:
        git_dir = _git_dir(root, fix)
        before = _blob(git_dir, f"{fix.commit}^", fix.path)
        after = _blob(git_dir, fix.commit, fix.path)
        if before is None:
            raise SystemExit(f"{fix.key}: the file is not in {fix.commit}^")
        before_findings = list(_findings(git_dir, f"{fix.commit}^", fix.path, alone))
        after_findings = list(_findings(git_dir, fix.commit, fix.path, alone))
        span = _scope_at(before, fix.line)
        # a sibling fix of the same commit and file (another bug the commit fixed in the same
        # scope) is that fix's true positive, not a false finding of this one
        siblings = {
            (f.line, f.rule)
            for f in fixes
            if f.commit == fix.commit and f.path == fix.path and f is not fix
        }
        before_findings = [f for f in before_findings if (f.line, f.code) not in siblings]
        found = _scored(_in(before_findings, span), fix.rule)
        for f in found:
            if (f.line, f.code) in fix.also_before:
                result.other_real_bugs.append(f"{fix.key}: before {f.line} {f.code}")
        found = [f for f in found if (f.line, f.code) not in fix.also_before]
        hits = [f for f in found if f.code == fix.rule]
        (result.true_positives if hits else result.false_negatives).append(fix.key)
        result.false_positives += [
            f"{fix.key}: before {f.line} {f.code}" for f in found if f.code != fix.rule
        ]
        if after is not None:
            after_span = _scope_named(after, span[0])
            for f in _scored(_in(after_findings, after_span), fix.rule):
                where = f"{fix.key}: after {f.line} {f.code}"
                if (f.line, f.code) in fix.also_after:
                    result.other_real_bugs.append(where)
                    continue
                result.false_positives.append(where)
                if f.code == fix.rule:
                    result.still_reported_after.append(fix.key)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("clone", help="bare-clone the repositories of the data file")
    get.add_argument("root", type=Path)
    get.add_argument("--source", required=True, help="clone URL template with {repo} or {folder}")
    run = sub.add_parser("score", help="lint before and after each fix; precision and recall")
    run.add_argument("root", type=Path)
    run.add_argument("--held-out", action="store_true", help="score the held-out part alone")
    run.add_argument(
        "--alone", action="store_true", help="lint each file by itself, without its tree"
    )
    run.add_argument("--json", type=Path, help="also write the result as JSON")
    run.add_argument("--min-precision", type=float, default=0.0)
    run.add_argument("--min-recall", type=float, default=0.0)
    args = parser.parse_args(argv)
    fixes = load(args.data)
    if args.command == "clone":
        clone(args.root, fixes, args.source)
        return 0
    parts = {"all": fixes, "held-out": [f for f in fixes if f.held_out and not f.spent]}
    spent = [f for f in fixes if f.held_out and f.spent]
    if spent:
        parts["held out before, then studied"] = spent
    parts["seen"] = [f for f in fixes if not f.held_out]
    if args.held_out:
        parts = {"held-out": parts["held-out"]}
    results = {name: score(args.root, part, args.alone) for name, part in parts.items()}
    for name, result in results.items():
        sys.stdout.write(result.report(name))
    if args.json:
        data = {
            name: {**vars(r), "precision": r.precision, "recall": r.recall}
            for name, r in results.items()
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    first = next(iter(results.values()))
    ok = bool(first.fixes) and (
        first.precision >= args.min_precision and first.recall >= args.min_recall
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

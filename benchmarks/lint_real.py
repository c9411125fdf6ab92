"""How right ``ampkit lint`` is on public training code: precision and recall.

The repositories are not part of this project. ``benchmarks/lint_real_expectations.json``
holds only facts about them: for each repository the commit it was read at, and for each
judged location (path, line, rule) a verdict reached by reading the code:

* ``true_positive``: the linter reports it and it is a real AMP bug;
* ``false_positive``: the linter reports (or reported) it and it is not a bug;
* ``missed_bug``: a real AMP bug found by reading that the linter did not report;
* ``real_bug``: a real AMP bug found by reading before the linter was run on the tree
  (scored as the two above: a true positive when reported, a false negative when not).

Scoring, for the behavioural rules (every code except AMP000, parse errors, and AMP006,
the deprecated API, which is reported separately; ``info`` findings and AMP012 are listed,
not scored):
a finding at a location judged ``true_positive`` or ``missed_bug`` is a true positive; one
judged ``false_positive`` or not judged at all is a false positive; a ``true_positive`` or
``missed_bug`` location the linter does not report is a false negative.
precision = TP / (TP + FP), recall = TP / (TP + FN).

Usage (no network needed once the checkouts exist)::

    # one folder per repository, named owner+name, at the pinned commits
    python benchmarks/lint_real.py checkout CHECKOUTS --source https://github.com/{repo}.git
    python benchmarks/lint_real.py score CHECKOUTS
    python benchmarks/lint_real.py score CHECKOUTS --min-precision 0.9 --min-recall 0.8

``--source`` is a template for ``git clone``: a URL, or a local folder of mirrors
(``/mirrors/{folder}``). Only ``*.py`` files are checked out (sparse checkout).

``--expectations benchmarks/lint_real_new_expectations.json`` scores the second set (public
repositories the linter was not tuned on when it was judged), kept apart from the regression
set; ``--expectations benchmarks/lint_real_third_expectations.json`` the third (verdicts by
reading before the linter ran on it).

The cost of the project-wide analysis (one process, each repository linted as one tree,
with and without its :class:`~ampkit.lint.project.ProjectIndex`, alternated)::

    python benchmarks/lint_real.py cost CHECKOUTS --repeat 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from ampkit.lint.api import lint_files
from ampkit.lint.discovery import discover
from ampkit.lint.findings import Finding, Severity

EXPECTATIONS = Path(__file__).with_name("lint_real_expectations.json")
REAL = ("true_positive", "missed_bug", "real_bug")
VERDICTS = (*REAL, "false_positive")
NOT_BEHAVIOURAL = ("AMP000", "AMP006")
# Listed, not scored: backward inside autocast was an info note when these sets were judged,
# so none of them holds a verdict for it.
LISTED = ("AMP012",)


@dataclass(frozen=True)
class Repository:
    """A repository of the measurement: ``owner/name`` and the commit it was read at."""

    repo: str
    commit: str

    @property
    def folder(self) -> str:
        """The checkout folder name: ``owner+name``."""
        return self.repo.replace("/", "+")


Key = tuple[str, str, int, str]  # repo, path, line, rule


def load(path: Path) -> tuple[list[Repository], dict[Key, dict[str, object]]]:
    """The repositories and the verdicts, keyed by location and rule."""
    data = json.loads(path.read_text(encoding="utf-8"))
    repos = [Repository(r["repo"], r["commit"]) for r in data["repositories"]]
    commits = {r.repo: r.commit for r in repos}
    verdicts: dict[Key, dict[str, object]] = {}
    for entry in data["verdicts"]:
        if entry["verdict"] not in VERDICTS:
            raise SystemExit(f"unknown verdict {entry['verdict']!r} in {entry}")
        if commits.get(entry["repo"]) != entry["commit"]:
            raise SystemExit(f"verdict for a commit not in the repository list: {entry}")
        key = (entry["repo"], entry["path"], int(entry["line"]), entry["rule"])
        if key in verdicts:
            raise SystemExit(f"two verdicts for {key}")
        verdicts[key] = entry
    return repos, verdicts


def checkout(root: Path, repos: list[Repository], source: str) -> None:
    """Clone each repository (only ``*.py`` files) into ``root/owner+name`` at its commit."""
    root.mkdir(parents=True, exist_ok=True)
    for repo in repos:
        dest = root / repo.folder
        if (dest / ".git").exists():
            head = _git(dest, "rev-parse", "HEAD")
            if head == repo.commit:
                continue
        else:
            url = source.format(repo=repo.repo, folder=repo.folder)
            subprocess.run(["git", "clone", "--quiet", "--no-checkout", url, str(dest)], check=True)
        _git(dest, "sparse-checkout", "set", "--no-cone", "*.py")
        _git(dest, "checkout", "--quiet", repo.commit)
        print(f"{repo.folder}: {repo.commit}", file=sys.stderr)


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def lint(root: Path, repos: list[Repository]) -> tuple[list[tuple[str, Finding]], int]:
    """All findings per repository (paths relative to the checkout) and the file count."""
    found: list[tuple[str, Finding]] = []
    total = 0
    for repo in repos:
        folder = root / repo.folder
        if not folder.is_dir():
            raise SystemExit(f"missing checkout {folder}; run the checkout command first")
        if (folder / ".git").exists() and _git(folder, "rev-parse", "HEAD") != repo.commit:
            raise SystemExit(f"{folder} is not at {repo.commit}")
        files, _ = discover([folder])
        total += len(files)
        for finding in lint_files(files, jobs=None).findings:
            rel = Path(finding.path).relative_to(folder).as_posix()
            found.append((repo.repo, _relocated(finding, rel)))
    return found, total


def _relocated(finding: Finding, path: str) -> Finding:
    return Finding(
        path, finding.line, finding.column, finding.code, finding.severity, finding.message
    )


@dataclass
class Score:
    """The measurement (see the module docstring)."""

    repositories: int
    files: int
    true_positives: list[Key]
    false_positives: list[Key]
    unjudged: list[Key]
    false_negatives: list[Key]
    info_findings: dict[str, int]
    amp006_findings: int
    amp006_fallbacks_reported: list[Key]
    amp006_fallbacks_judged: int
    amp006_old_api_found: int
    amp006_old_api_judged: int

    @property
    def precision(self) -> float:
        """TP / (TP + FP), unjudged findings counted as false."""
        wrong = len(self.false_positives) + len(self.unjudged)
        right = len(self.true_positives)
        return right / (right + wrong) if right or wrong else 1.0

    @property
    def recall(self) -> float:
        """TP / (TP + FN)."""
        right, missed = len(self.true_positives), len(self.false_negatives)
        return right / (right + missed) if right or missed else 1.0

    def per_rule(self) -> dict[str, dict[str, int]]:
        """True, false and missed counts per rule."""
        table: dict[str, dict[str, int]] = {}
        for name, keys in (
            ("tp", self.true_positives),
            ("fp", self.false_positives + self.unjudged),
            ("fn", self.false_negatives),
        ):
            for key in keys:
                table.setdefault(key[3], {"tp": 0, "fp": 0, "fn": 0})[name] += 1
        return dict(sorted(table.items()))

    def report(self) -> str:
        """The text ``score`` prints."""
        lines = [
            f"{self.repositories} repositories, {self.files} files",
            f"behavioural findings: {len(self.true_positives)} true, "
            f"{len(self.false_positives)} false, {len(self.unjudged)} not judged (counted as false)",
            f"missed bugs: {len(self.false_negatives)}",
            f"precision {self.precision:.3f}  recall {self.recall:.3f}",
            "per rule (tp/fp/fn): "
            + ", ".join(f"{c} {n['tp']}/{n['fp']}/{n['fn']}" for c, n in self.per_rule().items()),
            f"info findings (not scored): {self.info_findings}",
            f"AMP006: {self.amp006_findings} findings; on judged version-gated fallbacks: "
            f"{len(self.amp006_fallbacks_reported)} of {self.amp006_fallbacks_judged}; "
            f"judged old-API uses found: {self.amp006_old_api_found} of {self.amp006_old_api_judged}",
        ]
        for title, keys in (
            ("not judged", self.unjudged),
            ("false positive", self.false_positives),
            ("missed", self.false_negatives),
            ("AMP006 on a fallback", self.amp006_fallbacks_reported),
        ):
            lines.extend(f"  {title}: {k[0]} {k[1]}:{k[2]} {k[3]}" for k in sorted(keys))
        return "\n".join(lines) + "\n"


def score(root: Path, expectations: Path) -> Score:
    """Lint the checkouts and compare with the verdicts (see the module docstring)."""
    repos, verdicts = load(expectations)
    found, files = lint(root, repos)
    reported: set[Key] = set()
    tp: list[Key] = []
    fp: list[Key] = []
    unjudged: list[Key] = []
    info: Counter[str] = Counter()
    deprecated = 0
    for repo, f in found:
        key = (repo, f.path, f.line, f.code)
        if key in reported:
            continue  # one verdict per line and rule (``a.half() if c else a.bfloat16()``)
        reported.add(key)
        if f.code == "AMP006":
            deprecated += 1
        elif f.code in NOT_BEHAVIOURAL:
            continue
        elif f.severity is Severity.INFO or f.code in LISTED:
            info[f.code] += 1
        elif key not in verdicts:
            unjudged.append(key)
        elif verdicts[key]["verdict"] in REAL:
            tp.append(key)
        else:
            fp.append(key)
    real = {k for k, v in verdicts.items() if v["verdict"] in REAL}
    fn = [k for k in real if k[3] not in NOT_BEHAVIOURAL and k not in reported]
    gated = [k for k in verdicts if k[3] == "AMP006" and k not in real]
    old_api = [k for k in real if k[3] == "AMP006"]
    return Score(
        len(repos),
        files,
        tp,
        fp,
        unjudged,
        sorted(fn),
        dict(info),
        deprecated,
        sorted(k for k in gated if k in reported),
        len(gated),
        sum(1 for k in old_api if k in reported),
        len(old_api),
    )


def cost(root: Path, repeat: int) -> str:
    """Per-file lint time of every checkout under ``root`` without and with the project index
    (one process; the best of ``repeat`` alternated runs of each)."""
    trees = [discover([folder])[0] for folder in sorted(p for p in root.iterdir() if p.is_dir())]
    files = sum(len(t) for t in trees)
    best: dict[bool, float] = {}
    for _ in range(repeat):
        for project in (False, True):
            start = time.perf_counter()
            for tree in trees:
                lint_files(tree, jobs=1, project=project)
            elapsed = time.perf_counter() - start
            best[project] = min(best.get(project, elapsed), elapsed)
    per = {k: 1000 * v / max(files, 1) for k, v in best.items()}
    return (
        f"{len(trees)} trees, {files} files; per file: {per[False]:.2f} ms without the project "
        f"index, {per[True]:.2f} ms with it ({per[True] / per[False]:.2f}x)\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expectations", type=Path, default=EXPECTATIONS)
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("checkout", help="clone the repositories at the pinned commits")
    get.add_argument("root", type=Path)
    get.add_argument("--source", required=True, help="clone URL template with {repo} or {folder}")
    run = sub.add_parser("score", help="lint the checkouts and compute precision and recall")
    run.add_argument("root", type=Path)
    run.add_argument("--json", type=Path, help="also write the full result as JSON")
    run.add_argument("--min-precision", type=float, default=0.0)
    run.add_argument("--min-recall", type=float, default=0.0)
    timing = sub.add_parser("cost", help="per-file time without and with the project index")
    timing.add_argument("root", type=Path)
    timing.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if args.command == "cost":
        sys.stdout.write(cost(args.root, args.repeat))
        return 0
    if args.command == "checkout":
        repos, _ = load(args.expectations)
        checkout(args.root, repos, args.source)
        return 0
    result = score(args.root, args.expectations)
    sys.stdout.write(result.report())
    if args.json:
        data = {**asdict(result), "precision": result.precision, "recall": result.recall}
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    ok = result.precision >= args.min_precision and result.recall >= args.min_recall
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

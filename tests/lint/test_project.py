"""Project-wide analysis: a tree's files resolve what they import from each other.

Each folder of ``cases/projects`` is one linted tree; its files mark the findings the tree
must yield with ``# expect: CODE`` comments, as the golden cases do.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from ampkit.lint import api, check_paths, check_source
from ampkit.lint.discovery import SourceFile
from ampkit.lint.project import ProjectIndex, module_name, summarise

PROJECTS = Path(__file__).parent / "cases" / "projects"
TREES = sorted(p for p in PROJECTS.iterdir() if p.is_dir())
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>AMP\d{3}(?:\s*,\s*AMP\d{3})*)")


def expected(text: str) -> set[tuple[str, int]]:
    """The ``(code, line)`` pairs marked with ``# expect:`` comments (as in test_golden)."""
    return {
        (code.strip(), lineno)
        for lineno, line in enumerate(text.splitlines(), start=1)
        if (match := _EXPECT.search(line))
        for code in match.group("codes").split(",")
    }


def _expected(tree: Path) -> set[tuple[str, str, int]]:
    return {
        (str(path), code, line)
        for path in sorted(tree.rglob("*.py"))
        for code, line in expected(path.read_text(encoding="utf-8"))
    }


def _found(findings: list) -> set[tuple[str, str, int]]:
    return {(f.path, f.code, f.line) for f in findings}


@pytest.mark.parametrize("tree", TREES, ids=lambda p: p.name)
def test_tree_yields_the_marked_findings(tree: Path) -> None:
    assert _found(check_paths([tree])) == _expected(tree)


def test_wrapper_in_another_file_is_followed_only_in_project_mode() -> None:
    train = PROJECTS / "wrapper" / "train.py"
    assert not check_source(train.read_text(encoding="utf-8"), str(train))
    assert not check_paths([PROJECTS / "wrapper"], project=False)
    assert {f.code for f in check_paths([PROJECTS / "wrapper"])} == {"AMP002", "AMP009"}


def test_lightning_precision_set_in_another_file_makes_manual_backward_scaled() -> None:
    model = PROJECTS / "lightning" / "model.py"
    alone = check_source(model.read_text(encoding="utf-8"), str(model))
    assert [f.code for f in alone] == ["AMP002"]
    assert "manual_backward" in alone[0].message
    assert not check_paths([PROJECTS / "lightning"])


def test_flag_set_true_by_a_caller_in_another_file_makes_fp16_reachable() -> None:
    helpers = PROJECTS / "flag" / "helpers.py"
    assert not check_source(helpers.read_text(encoding="utf-8"), str(helpers))
    assert [f.code for f in check_paths([PROJECTS / "flag"])] == ["AMP002"]


def test_findings_do_not_depend_on_file_order_or_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [SourceFile(p, PROJECTS) for p in sorted(PROJECTS.rglob("*.py"))]
    reference = api.lint_files(files, jobs=1).findings
    shuffled = files[:]
    random.Random(7).shuffle(shuffled)
    again = api.lint_files(shuffled, jobs=1).findings
    by_file = sorted(reference, key=lambda f: f.sort_key)
    assert sorted(again, key=lambda f: f.sort_key) == by_file
    monkeypatch.setattr(api, "_PARALLEL_MIN_FILES", 1)
    parallel = api.lint_files(shuffled, jobs=2).findings
    assert sorted(parallel, key=lambda f: f.sort_key) == by_file
    assert _found(reference) == set().union(*(_expected(t) for t in TREES))


def test_module_names_and_relative_imports() -> None:
    root = Path("/repo")
    assert module_name(root / "pkg" / "utils.py", root) == "pkg.utils"
    assert module_name(root / "pkg" / "__init__.py", root) == "pkg"
    summary = summarise("import torch\ndef ctx(d):\n    return torch.autocast('cuda', dtype=d)\n")
    assert summary is not None and "ctx" in summary.wrappers
    index = ProjectIndex([("pkg.amp_utils", "/repo/pkg/amp_utils.py", summary)])
    view = index.view("/repo/pkg/train.py", "pkg.train")
    assert view.wrapper(".amp_utils.ctx") is not None
    assert view.wrapper("pkg.amp_utils.ctx") is not None
    assert view.wrapper("amp_utils.ctx") is not None  # a suffix of the module name
    assert view.wrapper(".other.ctx") is None
    assert view.wrapper("torch.autocast") is None


def test_nearest_module_wins_when_two_share_a_name() -> None:
    fp16 = summarise("import torch\nDTYPE = torch.float16\n")
    bf16 = summarise("import torch\nDTYPE = torch.bfloat16\n")
    assert fp16 is not None and bf16 is not None
    index = ProjectIndex(
        [("a.config", "/r/a/config.py", fp16), ("b.config", "/r/b/config.py", bf16)]
    )
    assert index.view("/r/a/train.py", "a.train").dtypes("config.DTYPE") == {"float16"}
    assert index.view("/r/b/train.py", "b.train").dtypes("config.DTYPE") == {"bfloat16"}


def test_the_command_line_follows_the_wrapper_unless_told_not_to() -> None:
    from click.testing import CliRunner

    from ampkit.cli import main

    tree = str(PROJECTS / "wrapper")
    with_index = CliRunner().invoke(main, ["lint", tree, "--isolated"])
    alone = CliRunner().invoke(main, ["lint", tree, "--isolated", "--no-project"])
    assert with_index.exit_code == 1 and "AMP002" in with_index.output
    assert alone.exit_code == 0 and "AMP002" not in alone.output


def test_trainer_split_over_files_follows_the_base_class_methods() -> None:
    tree = PROJECTS / "split_trainer"
    alone = {(Path(f.path).name, f.code) for f in check_paths([tree], project=False)}
    # alone, the inherited backward/step/update are invisible: two fp16 trainings and the
    # clip of a scaled gradient go unseen, and the update in the base class is missed
    assert alone == {("fp16_scaled.py", "AMP005")}
    found = check_paths([tree])
    assert {(Path(f.path).name, f.code, f.line) for f in found} == {
        (Path(p).name, c, line) for p, c, line in _expected(tree)
    }
    # a finding made of events written in the base file stands in the linted file
    assert {Path(f.path).name for f in found} == {"fp16_plain.py", "clip_unscaled.py"}


def test_parsed_base_files_stay_in_the_process_and_a_pickled_index_starts_empty() -> None:
    import pickle

    from ampkit.lint.check import check_file

    root = PROJECTS / "split_trainer"
    files = [SourceFile(p, root) for p in sorted(root.rglob("*.py"))]
    index = api.build_index(files, None, 1)
    train = root / "fp16_plain.py"

    def lint(with_index: ProjectIndex) -> list:
        return check_file(train, project=with_index.view(train, module_name(train, root)))

    first = lint(index)
    assert [f.code for f in first] == ["AMP002", "AMP002"]
    assert str(root / "engine" / "base.py") in index.cache  # parsed once, kept
    copy = pickle.loads(pickle.dumps(index))
    assert copy.cache == {} and len(copy) == len(index)
    assert lint(copy) == first


def test_a_base_file_is_parsed_once_however_many_subclasses_use_it(tmp_path: Path) -> None:
    """The cost of following bases stays per file: one shared base is one parse."""
    from ampkit.lint.check import check_file

    (tmp_path / "base.py").write_text(
        (PROJECTS / "split_trainer" / "engine" / "base.py").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    subclass = (
        "import torch\nfrom base import PlainTrainer\n\n\n"
        "class T{n}(PlainTrainer):\n"
        "    def train(self, loader):\n"
        "        for x in loader:\n"
        "            with torch.autocast('cuda', dtype=torch.float16):\n"
        "                loss = self.model(x)\n"
        "            self.backward(loss)\n"
        "            self.optimizer_step()\n"
    )
    paths = []
    for n in range(30):
        path = tmp_path / f"train_{n}.py"
        path.write_text(subclass.format(n=n), encoding="utf-8")
        paths.append(path)
    files = [SourceFile(p, tmp_path) for p in sorted(tmp_path.glob("*.py"))]
    index = api.build_index(files, None, 1)
    for path in paths:
        found = check_file(path, project=index.view(path, module_name(path, tmp_path)))
        assert [(f.code, f.line) for f in found] == [("AMP002", 8)]
    assert list(index.cache) == [str(tmp_path / "base.py")]

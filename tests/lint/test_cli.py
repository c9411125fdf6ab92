"""The ``ampkit lint`` command: formats, exit codes, selection, suppression, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ampkit.cli import main
from ampkit.lint import RULES, Selection, Severity, check_paths, check_source

BAD = (
    "import torch\n"
    "scaler = torch.amp.GradScaler('cuda')\n"
    "for x in data:\n"
    "    scaler.scale(model(x)).backward()\n"
    "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    "    scaler.step(optimizer)\n"
    "    scaler.update()\n"
)
BACKWARD_IN_AUTOCAST_ONLY = (
    "import torch\n"
    "with torch.autocast('cuda', dtype=torch.bfloat16):\n"
    "    loss = model(x)\n"
    "    loss.backward()\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BAD, encoding="utf-8")
    (tmp_path / "pkg" / "ok.py").write_text("x = 1\n", encoding="utf-8")
    (tmp_path / "pkg" / "notes.txt").write_text("scaler.step(", encoding="utf-8")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "lib.py").write_text(BAD, encoding="utf-8")
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["lint", *args])
    return result.exit_code, result.output


def test_text_format_and_exit_code(project: Path) -> None:
    code, out = run(str(project))
    assert code == 1
    path = project / "pkg" / "train.py"
    assert f"{path}:5:5: AMP001 " in out
    assert ".venv" not in out


def test_clean_folder_exits_zero(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("print('hi')\n", encoding="utf-8")
    assert run(str(tmp_path)) == (0, "")


def test_backward_inside_autocast_alone_fails(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BACKWARD_IN_AUTOCAST_ONLY, encoding="utf-8")
    code, out = run(str(tmp_path))
    assert code == 1 and "AMP012" in out


def test_only_info_severity_lets_the_run_pass() -> None:
    assert [s.value for s in Severity if not s.fails] == ["info"]


def test_json_format(project: Path) -> None:
    code, out = run(str(project), "--format", "json")
    assert code == 1
    data = json.loads(out)
    assert data == [
        {
            "path": str(project / "pkg" / "train.py"),
            "line": 5,
            "column": 5,
            "code": "AMP001",
            "severity": "error",
            "message": data[0]["message"],
        }
    ]


def test_json_has_fix_when_one_exists(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "import torch\ns = torch.cuda.amp.GradScaler()\n", encoding="utf-8"
    )
    _, out = run(str(tmp_path), "--format", "json")
    (item,) = json.loads(out)
    assert item["code"] == "AMP006" and item["fix"]["edits"]


def test_sarif_format(project: Path) -> None:
    code, out = run(str(project), "--format", "sarif")
    assert code == 1
    log = json.loads(out)
    assert log["version"] == "2.1.0"
    (run_,) = log["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(RULES)
    (result,) = run_["results"]
    assert result["ruleId"] == "AMP001" and result["level"] == "error"
    assert rules[result["ruleIndex"]]["id"] == "AMP001"
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 5, "startColumn": 5}


def test_github_format(project: Path) -> None:
    code, out = run(str(project), "--format", "github")
    assert code == 1
    path = project / "pkg" / "train.py"
    assert out.startswith(f"::error file={path},line=5,col=5,title=AMP001::gradients are clipped")


def test_select_and_ignore(project: Path) -> None:
    assert run(str(project), "--ignore", "AMP001")[0] == 0
    assert run(str(project), "--select", "AMP002,AMP003")[0] == 0
    assert run(str(project), "--select", "AMP00")[0] == 1
    assert run(str(project), "--select", "AMP001", "--ignore", "AMP0")[0] == 0


def test_exit_zero(project: Path) -> None:
    code, out = run(str(project), "--exit-zero")
    assert code == 0 and "AMP001" in out


@pytest.mark.parametrize(
    "marker", ["# ampkit: noqa", "# ampkit: noqa: AMP001", "#ampkit:noqa:AMP002,AMP001"]
)
def test_noqa_suppresses(marker: str) -> None:
    text = BAD.replace("1.0)\n", f"1.0)  {marker}\n")
    assert [f.code for f in check_source(text)] == []


def test_noqa_for_other_code_does_not_suppress() -> None:
    text = BAD.replace("1.0)\n", "1.0)  # ampkit: noqa: AMP002\n")
    assert [f.code for f in check_source(text)] == ["AMP001"]


def test_noqa_inside_string_does_not_count() -> None:
    text = BAD.replace("1.0)\n", "1.0); s = '# ampkit: noqa'\n")
    assert [f.code for f in check_source(text)] == ["AMP001"]


def test_unknown_code_is_usage_error(project: Path) -> None:
    code, out = run(str(project), "--select", "AMP999")
    assert code == 2
    assert "unknown rule code 'AMP999'" in out and "AMP001" in out
    assert len(out.strip().splitlines()) == 1


def test_missing_path_is_usage_error(tmp_path: Path) -> None:
    code, out = run(str(tmp_path / "nope.py"))
    assert code == 2
    assert "does not exist" in out and len(out.strip().splitlines()) == 1


def test_bad_format_is_usage_error(project: Path) -> None:
    assert run(str(project), "--format", "xml")[0] == 2


def test_explain() -> None:
    code, out = run("--explain", "amp001")
    assert code == 0
    assert "AMP001" in out and "Bad::" in out and "Good::" in out
    code, out = run("--explain", "AMP999")
    assert code == 2 and len(out.strip().splitlines()) == 1 and "AMP001" in out


def test_check_source_docstring_example() -> None:
    import doctest

    from ampkit.lint import check

    result = doctest.testmod(check)
    assert result.attempted >= 1 and result.failed == 0


def test_help_has_example() -> None:
    code, out = run("--help")
    assert code == 0 and "Examples:" in out and "ampkit lint " in out


def test_broken_file_is_one_finding_and_run_continues(tmp_path: Path) -> None:
    (tmp_path / "a_broken.py").write_text("def f(:\n", encoding="utf-8")
    (tmp_path / "b_bad.py").write_text(BAD, encoding="utf-8")
    (tmp_path / "c_binary.py").write_bytes(b"\x00\xff\xfe garbage")
    (tmp_path / "d_latin1.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n")
    findings = check_paths([tmp_path])
    codes = [(Path(f.path).name, f.code) for f in findings]
    assert ("a_broken.py", "AMP000") in codes
    assert ("b_bad.py", "AMP001") in codes
    assert ("c_binary.py", "AMP000") in codes
    assert not any(name == "d_latin1.py" for name, _ in codes)
    assert sum(1 for name, _ in codes if name == "a_broken.py") == 1


def test_check_paths_selection_errors() -> None:
    from ampkit.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        Selection.from_options(["NOPE"])
    with pytest.raises(ConfigurationError):
        check_paths(["/definitely/not/here"])


def test_diff_prints_fix_without_writing(tmp_path: Path) -> None:
    target = tmp_path / "t.py"
    text = "import torch\ns = torch.cuda.amp.GradScaler()\n"
    target.write_text(text, encoding="utf-8")
    code, out = run(str(target), "--diff")
    assert code == 1
    assert '+s = torch.amp.GradScaler("cuda")' in out and "-s = torch.cuda.amp.GradScaler()" in out
    assert target.read_text(encoding="utf-8") == text
    assert run(str(target), "--diff", "--fix")[0] == 2


def test_exclude_option(project: Path) -> None:
    assert run(str(project), "--exclude", "train.py")[0] == 0
    assert run(str(project), "--exclude", "pkg")[0] == 0
    assert run(str(project / "pkg" / "train.py"), "--exclude", "*/pkg/*")[0] == 0


def test_pyproject_config(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    (project / "pyproject.toml").write_text('[tool.ampkit.lint]\nignore = ["AMP001"]\n')
    assert run("pkg")[0] == 0
    assert run("pkg", "--isolated")[0] == 1
    (project / "pyproject.toml").write_text('[tool.ampkit.lint]\nselect = ["AMP002"]\n')
    assert run("pkg")[0] == 0
    assert run("pkg", "--select", "AMP001")[0] == 1
    (project / "pyproject.toml").write_text('[tool.ampkit.lint]\nexclude = ["pkg/train.py"]\n')
    assert run("pkg")[0] == 0
    (project / "pyproject.toml").write_text('[tool.ampkit.lint]\nselct = ["AMP002"]\n')
    code, out = run("pkg")
    assert code == 2 and "unknown key(s) selct" in out and "allowed keys are" in out
    (project / "pyproject.toml").write_text("[tool.ampkit.lint\n")
    assert run("pkg")[0] == 2

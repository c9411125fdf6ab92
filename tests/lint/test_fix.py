"""``--fix`` codemod: in/out pairs, idempotency, and that nothing else in a file changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ampkit.cli import main
from ampkit.lint import check_source, fix_source

FIXES = Path(__file__).parent / "fixes"
PAIRS = sorted(FIXES.glob("*_in.py"))


@pytest.mark.parametrize("src", PAIRS, ids=lambda p: p.stem.removesuffix("_in"))
def test_fix_pair(src: Path) -> None:
    before = src.read_text(encoding="utf-8")
    after = (FIXES / src.name.replace("_in.py", "_out.py")).read_text(encoding="utf-8")
    fixed, _ = fix_source(before, str(src))
    assert fixed == after


@pytest.mark.parametrize("src", PAIRS, ids=lambda p: p.stem.removesuffix("_in"))
def test_fix_is_idempotent(src: Path) -> None:
    once, _ = fix_source(src.read_text(encoding="utf-8"))
    twice, count = fix_source(once)
    assert twice == once
    assert count == 0
    assert not any(f.fix is not None for f in check_source(once))


def test_fixed_files_have_no_fixable_amp006_left() -> None:
    for src in PAIRS:
        if src.name.startswith("unsafe"):
            continue
        fixed, _ = fix_source(src.read_text(encoding="utf-8"))
        lines = fixed.splitlines()
        left = [f for f in check_source(fixed) if f.code == "AMP006"]
        assert all("not fixable" in lines[f.line - 1] for f in left), src.name


def test_unsafe_import_is_reported_without_fix() -> None:
    findings = check_source((FIXES / "unsafe_in.py").read_text(encoding="utf-8"))
    assert findings and all(f.code == "AMP006" and f.fix is None for f in findings)


def test_cli_fix_rewrites_file_and_keeps_crlf(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_bytes(
        b"import torch\r\nscaler = torch.cuda.amp.GradScaler()\r\nx = 1  # untouched\r\n"
    )
    result = CliRunner().invoke(main, ["lint", str(target), "--fix"])
    assert result.exit_code == 0, result.output
    assert (
        target.read_bytes()
        == b'import torch\r\nscaler = torch.amp.GradScaler("cuda")\r\nx = 1  # untouched\r\n'
    )
    again = CliRunner().invoke(main, ["lint", str(target), "--fix"])
    assert again.exit_code == 0
    assert target.read_bytes().count(b'"cuda"') == 1


def test_cli_fix_respects_noqa_and_ignore(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    text = "import torch\nscaler = torch.cuda.amp.GradScaler()  # ampkit: noqa\n"
    target.write_text(text, encoding="utf-8")
    assert CliRunner().invoke(main, ["lint", str(target), "--fix"]).exit_code == 0
    assert target.read_text(encoding="utf-8") == text
    target.write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["lint", str(target), "--fix", "--ignore", "AMP006"])
    assert result.exit_code == 0
    assert "torch.cuda.amp" in target.read_text(encoding="utf-8")


def test_fix_leaves_other_findings_alone(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text(
        "import torch\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
        "scaler.scale(loss).backward()\n"
        "torch.nn.utils.clip_grad_norm_(params, 1.0)\n"
        "scaler.step(optimizer)\n"
        "scaler.update()\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["lint", str(target), "--fix"])
    assert result.exit_code == 1
    assert "AMP001" in result.output and "AMP006" not in result.output
    assert "clip_grad_norm_(params, 1.0)" in target.read_text(encoding="utf-8")


_IMPORTS = [
    ("import torch\n", "torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"),
    ("import torch as th\n", "th.cuda.amp.autocast", "th.cuda.amp.GradScaler"),
    ("from torch.cuda.amp import autocast, GradScaler\n", "autocast", "GradScaler"),
    ("from torch.cuda.amp import autocast as ac, GradScaler as GS\n", "ac", "GS"),
    ("from torch.cuda import amp\n", "amp.autocast", "amp.GradScaler"),
    ("import torch.cuda.amp as amp\n", "amp.autocast", "amp.GradScaler"),
]
_ARGS = [
    "",
    "True",
    "False, torch.float16",
    "enabled=use_amp",
    "dtype=torch.float16",
    "\n    enabled=True,  # c\n",
]
_SCALER_ARGS = ["", "init_scale=1024", "2.0**10, 2.0", "\n    enabled=use_amp,\n"]


@pytest.mark.parametrize("header", _IMPORTS, ids=lambda h: h[0].strip())
def test_generated_deprecated_calls_fix_to_valid_code(header: tuple[str, str, str]) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    imp, autocast, scaler = header

    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(
            st.tuples(st.sampled_from(_ARGS), st.sampled_from(_SCALER_ARGS)), min_size=1, max_size=3
        )
    )
    def check(calls: list[tuple[str, str]]) -> None:
        body = "".join(
            f"s{i} = {scaler}({sargs})\nwith {autocast}({aargs}):\n    y = f(x)\n"
            for i, (aargs, sargs) in enumerate(calls)
        )
        text = "import torch\n" + imp + body
        fixed, _ = fix_source(text)
        compile(fixed, "fixed.py", "exec", dont_inherit=True)
        assert fix_source(fixed)[0] == fixed
        assert [f for f in check_source(fixed) if f.code == "AMP006"] == []
        assert fixed.count('"cuda"') == 2 * len(calls)

    check()


def test_fixed_submodule_imports_run_on_torch_without_deprecation() -> None:
    """The old API imported from its submodules warns on torch; the fixed text does not."""
    torch = pytest.importorskip("torch")
    import warnings

    cpu = {"torch": torch}
    before = (FIXES / "submodule_in.py").read_text(encoding="utf-8")
    after, _ = fix_source(before)
    # the CPU device runs everywhere; the rewrite is the same for both devices
    after = after.replace('"cuda"', '"cpu"')
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        exec(compile(after, "submodule_out.py", "exec"), dict(cpu))
        with pytest.raises(FutureWarning):
            exec(compile(before, "submodule_in.py", "exec"), dict(cpu))

"""Only regular files are read; ``--fix`` writes atomically and never leaves the tree."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner

from ampkit.cli import main
from ampkit.lint import check_paths
from ampkit.lint.discovery import NotRegularFileError, discover, read_source
from ampkit.lint.fix import fix_file

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
FIXED = 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'

T = TypeVar("T")
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["lint", *args])
    return result.exit_code, result.output


def _with_deadline(func: Callable[[], T], seconds: float = 20.0) -> T:
    """Run ``func`` in a thread; fail instead of hanging when it blocks on a FIFO."""
    result: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(func())
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "linting blocked (a non-regular file was read)"
    if errors:
        raise errors[0]
    return result[0]


@needs_fifo
def test_fifo_in_a_folder_is_skipped_with_a_note(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.py")
    (tmp_path / "real.py").write_text(DEPRECATED, encoding="utf-8")
    files, skipped = discover([tmp_path])
    assert [f.path.name for f in files] == ["real.py"]
    assert [(s.path.name, s.reason) for s in skipped] == [("x.py", "not a regular file (a FIFO)")]
    code, out = _with_deadline(lambda: run(str(tmp_path)))
    assert code == 1 and "real.py:2:10: AMP006" in out
    assert f"note: {tmp_path / 'x.py'}: not linted: not a regular file (a FIFO)" in out


@needs_fifo
def test_named_fifo_is_skipped_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    code, out = _with_deadline(lambda: run(str(fifo), "--fix"))
    assert code == 0 and "not linted: not a regular file (a FIFO)" in out
    with pytest.raises(NotRegularFileError):
        _with_deadline(lambda: read_source(fifo))


def test_symlink_to_a_device_and_broken_symlink_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    files, skipped = discover([tmp_path])
    assert files == []
    assert sorted((s.path.name, s.reason) for s in skipped) == [
        ("gone.py", "a broken symlink"),
        ("zero.py", "not a regular file (a character device)"),
    ]
    assert _with_deadline(lambda: check_paths([tmp_path])) == []


def test_fix_refuses_a_symlink_that_leaves_the_tree(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    tree = tmp_path / "tree"
    outside.mkdir()
    tree.mkdir()
    target = outside / "shared.py"
    target.write_text(DEPRECATED, encoding="utf-8")
    (tree / "link.py").symlink_to(target)
    code, out = run(str(tree), "--fix")
    assert target.read_text(encoding="utf-8") == DEPRECATED
    assert (tree / "link.py").is_symlink()
    assert "not fixed: it is a symlink to" in out and "AMP006" in out and code == 1


def test_fix_through_a_symlink_inside_the_tree_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    real.write_text(DEPRECATED, encoding="utf-8")
    (tmp_path / "alias.py").symlink_to(real)
    assert fix_file(tmp_path / "alias.py", root=tmp_path).count == 1
    assert (tmp_path / "alias.py").is_symlink()
    assert real.read_text(encoding="utf-8") == FIXED


def test_fix_writes_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text(DEPRECATED, encoding="utf-8")
    target.chmod(0o640)
    assert fix_file(target).count == 1
    assert target.read_text(encoding="utf-8") == FIXED
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_failed_write_leaves_the_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "train.py"
    target.write_text(DEPRECATED, encoding="utf-8")

    def refuse(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    done = fix_file(target)
    assert done.failed and done.count == 0
    assert done.note == f"{target}: not fixed: it cannot be written (disk full)"
    assert target.read_text(encoding="utf-8") == DEPRECATED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_fix_refuses_a_read_only_file_in_one_line_and_fails_the_run(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text(DEPRECATED, encoding="utf-8")
    target.chmod(0o444)
    code, out = run(str(target), "--fix")
    assert code == 1
    assert f"note: {target}: not fixed: it is read-only (mode 0444)" in out
    assert "Traceback" not in out
    assert target.read_text(encoding="utf-8") == DEPRECATED  # root could have replaced it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_fix_into_a_folder_that_refuses_writes_is_one_line(tmp_path: Path) -> None:
    """What an immutable file (chattr +i) or a read-only mount does: the rename fails."""
    folder = tmp_path / "ro"
    folder.mkdir()
    target = folder / "train.py"
    target.write_text(DEPRECATED, encoding="utf-8")
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root ignores the folder's bits: refuse the rename
            done = _refused_rename(target)
        else:
            code, out = run(str(target), "--fix")
            assert code == 1 and "not fixed: it cannot be written" in out
            assert "Traceback" not in out
            done = fix_file(target)
        assert done.failed and "not fixed: it cannot be written" in (done.note or "")
        assert target.read_text(encoding="utf-8") == DEPRECATED
    finally:
        folder.chmod(0o755)


def _refused_rename(target: Path) -> object:
    import errno

    original = os.replace

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    os.replace = refuse  # type: ignore[assignment]
    try:
        return fix_file(target)
    finally:
        os.replace = original


def test_a_symlink_loop_named_on_the_command_line_fails_like_an_unreadable_file(
    tmp_path: Path,
) -> None:
    loop = tmp_path / "loop.py"
    loop.symlink_to(tmp_path / "loop.py")
    code, out = run(str(loop))
    assert code == 1 and f"{loop}:1:1: AMP000" in out and "cannot read" in out
    unreadable = tmp_path / "secret.py"
    unreadable.write_text(DEPRECATED, encoding="utf-8")
    unreadable.chmod(0)
    try:
        if not os.access(unreadable, os.R_OK):  # as root every file is readable
            assert run(str(unreadable))[0] == code
    finally:
        unreadable.chmod(0o644)


def test_a_file_over_the_size_limit_is_one_amp000_and_not_read(tmp_path: Path) -> None:
    big = tmp_path / "generated.py"
    # 0.12 MB against limits of a tenth of that size: the same paths as 1.2 MB against 1 MB,
    # at a tenth of the linting (a limit is any number of megabytes)
    big.write_text(DEPRECATED + "x = 1\n" * 20_000, encoding="utf-8")
    code, out = run(str(big), "--max-file-size", "0.1")
    assert code == 1 and f"{big}:1:1: AMP000" in out and "0.1 MB is over the 0.1 MB limit" in out
    assert "AMP006" not in out  # not analysed
    code, out = run(str(big), "--max-file-size", "0")  # no limit
    assert "AMP006" in out and "AMP000" not in out
    assert run(str(big), "--max-file-size", "0.2", "--fix")[0] == 0
    assert big.read_text(encoding="utf-8").startswith(FIXED)


def test_the_size_limit_from_pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.ampkit.lint]\nmax-file-size = 0.0001\n", encoding="utf-8"
    )
    (tmp_path / "train.py").write_text(DEPRECATED + "# padding\n" * 20, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, out = run("train.py")
    assert code == 1 and "AMP000" in out and "over the 0.0001 MB limit" in out
    assert "AMP006" in run("train.py", "--max-file-size", "1")[1]
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ampkit.lint]\nmax-file-size = "big"\n', encoding="utf-8"
    )
    code, out = run("train.py")
    assert code == 2 and "max-file-size must be a number of megabytes" in out

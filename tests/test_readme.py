"""The README's examples run as written, and its shell steps run in order on a fresh folder."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

#: The marker on the line before a shell block that the in-order test does not run.
_SKIP = re.compile(r"<!-- readme-test skip: (.+?) -->")


def test_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the Trainer example writes runs/readme/checkpoints
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_test_command_is_what_ci_runs():
    command = re.search(r"^(python -m pytest.*)$", README.read_text(), flags=re.M).group(1)
    ci = (README.parent / ".ci" / "run").read_text()
    assert command in ci.splitlines()


def shell_blocks(text: str) -> list[tuple[str, str | None]]:
    """The README's shell blocks in order: (commands, the skip marker's reason or None).

    A shell block is a fence without a language (or ``sh``/``bash``); ``text`` fences hold
    output, ``python`` fences Python. ``pip install`` lines are left out: the environment
    under test is the one they install.
    """
    blocks: list[tuple[str, str | None]] = []
    lang: str | None = None  # the open fence's language; None outside a fence
    body: list[str] = []
    before = ""
    for line in text.splitlines():
        if lang is None:
            if line.startswith("```"):
                lang, body = line[3:].strip(), []
                skip = _SKIP.fullmatch(before.strip())
                reason = skip[1] if skip else None
            before = line
            continue
        if line.startswith("```"):
            if lang in ("", "sh", "bash"):
                kept = [b for b in body if not b.lstrip().startswith("pip install")]
                blocks.append(("\n".join(kept) + "\n", reason))
            lang, before = None, line
            continue
        body.append(line)
    return blocks


def test_every_unmarked_plain_block_is_a_shell_step():
    # output samples are ```text blocks; a plain block must start with a command
    for commands, skip in shell_blocks(README.read_text()):
        first = next((line for line in commands.splitlines() if line.strip()), "")
        assert skip is not None or re.match(r"(ampkit|python) ", first), commands


def run_in_order(blocks: list[tuple[str, str | None]], root: Path) -> list[str]:
    """Run every block without a skip reason, one after the other, in ``root / "clone"`` (made
    empty), with ``ampkit`` this interpreter's (so the sources under test run); return what
    each step took. A step that fails stops the run: AssertionError with its commands and
    output.
    """
    import ampkit

    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    shim = bin_dir / "ampkit"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ampkit "$@"\n')
    shim.chmod(0o755)
    src = str(Path(ampkit.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
        + os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
    }
    work = root / "clone"
    work.mkdir()
    took = []
    for commands, skip in blocks:
        if skip is not None:
            continue
        start = time.monotonic()
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", commands],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        took.append(f"{time.monotonic() - start:6.1f} s  {commands.splitlines()[0]}")
        assert done.returncode == 0, f"{commands}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return took


def test_steps_share_one_folder_skip_the_marked_and_stop_at_a_failure(tmp_path):
    text = (
        "```\nmkdir runs && ampkit --help > runs/help.txt\n```\n"
        "<!-- readme-test skip: not a step -->\n```\nexit 3\n```\n"
        "```text\nnot a command\n```\n"
        "```\npip install nothing-at-all\ngrep -q 'Usage:.* ampkit' runs/help.txt\n```\n"
    )
    blocks = shell_blocks(text)
    assert [skip for _, skip in blocks] == [None, "not a step", None]  # the text block is output
    assert "pip install" not in blocks[2][0]  # the environment under test is installed
    assert len(run_in_order(blocks, tmp_path / "ok")) == 2  # the second step sees the first's
    with pytest.raises(AssertionError, match="no-such-file"):
        run_in_order(shell_blocks("```\ncat no-such-file\n```\n"), tmp_path / "failing")


@pytest.mark.readme
@pytest.mark.timeout(3600)
def test_shell_steps_run_in_order_in_a_fresh_folder(tmp_path):
    """Every shell block not marked ``readme-test skip``, one after the other, in one empty
    folder: the README followed top to bottom on a fresh clone."""
    took = run_in_order(shell_blocks(README.read_text()), tmp_path)
    print("\n".join(took))  # -s shows what each step took: the README's warnings come from it
    assert len(took) >= 5

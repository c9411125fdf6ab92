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


@pytest.mark.readme
@pytest.mark.timeout(3600)
def test_shell_steps_run_in_order_in_a_fresh_folder(tmp_path):
    """Every shell block not marked ``readme-test skip``, one after the other, in one empty
    folder, with ``ampkit`` being this interpreter's (so the sources under test run)."""
    import ampkit

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
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
    work = tmp_path / "clone"
    work.mkdir()
    ran, took = 0, []
    for commands, skip in shell_blocks(README.read_text()):
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
        ran += 1
    print("\n".join(took))  # -s shows what each step took: the README's warnings come from it
    assert ran >= 5

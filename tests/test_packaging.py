"""``pip install ampkit`` (what the pre-commit hook and pipx run) installs no torch, and the
linter runs there; everything else says in one line that it needs PyTorch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUGGY = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def test_the_hooks_run_the_linter():
    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert "entry: ampkit lint" in hooks and "language: python" in hooks


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_bare_install_has_no_torch_and_lints(tmp_path):
    """What pre-commit does for a ``language: python`` hook: a new venv, ``pip install .``."""
    venv = tmp_path / "hook-env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_dir = venv / ("Scripts" if sys.platform == "win32" else "bin")
    installed = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    listed = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.lower()  # fmt: skip
    assert "torch" not in listed and "nvidia" not in listed, listed

    source = tmp_path / "train.py"
    source.write_text(BUGGY, encoding="utf-8")
    lint = subprocess.run(
        [str(bin_dir / "ampkit"), "lint", str(source)], capture_output=True, text=True, timeout=120
    )
    assert lint.returncode == 1 and "AMP006" in lint.stdout, lint.stdout + lint.stderr

    train = subprocess.run(
        [str(bin_dir / "ampkit"), "train", "--steps", "1"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    lines = [line for line in train.stderr.splitlines() if line.strip()]
    assert train.returncode == 2 and len(lines) == 1, train.stderr
    assert "ampkit train needs PyTorch, which is not installed" in lines[0]

    api = subprocess.run(
        [str(bin_dir / "python"), "-c", "import ampkit; ampkit.Trainer"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert api.returncode == 1 and "MissingDependencyError" in api.stderr
    assert "ampkit.Trainer needs PyTorch" in api.stderr

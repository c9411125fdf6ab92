"""The README's examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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

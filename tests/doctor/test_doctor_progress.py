"""``diagnose(progress=...)`` reports each measured step and each module re-run; ``ampkit
doctor`` draws nothing extra when stderr is not a terminal or with ``--no-progress``."""

from __future__ import annotations

from click.testing import CliRunner
from doctor_models import healthy

from ampkit.cli import main
from ampkit.doctor import diagnose


def _calls(precision: str, steps: int = 2) -> tuple[list[tuple[str, int, int]], int]:
    model, closure = healthy()
    calls: list[tuple[str, int, int]] = []
    diagnose(model, closure, precision, steps=steps, progress=lambda *c: calls.append(c))
    return calls, len(list(model.named_modules()))


def test_progress_counts_steps_module_reruns_and_passes():
    calls, modules = _calls("fp16", steps=2)
    assert [c for c in calls if c[0] == "fp32 steps"] == [
        ("fp32 steps", 0, 2),
        ("fp32 steps", 1, 2),
        ("fp32 steps", 2, 2),
    ]
    reruns = [c for c in calls if c[0] == "module re-runs"]
    assert [c[1] for c in reruns] == list(range(1, modules + 1)) + [modules]
    assert {c[2] for c in reruns} == {modules}
    # the re-runs happen inside step 1, before it is counted
    assert calls.index(("module re-runs", modules, modules)) < calls.index(("fp32 steps", 1, 2))
    assert ("precision map", 0, 1) in calls and ("precision map", 1, 1) in calls
    assert calls[-1] == ("precision mode probes", 1, 1)


def test_an_fp32_diagnosis_re_runs_no_module():
    calls, _ = _calls("fp32", steps=1)
    assert not [c for c in calls if c[0] == "module re-runs"]
    assert ("fp32 steps", 1, 1) in calls


def test_the_command_draws_no_progress_off_a_terminal():
    args = ["doctor", "--model", "doctor_models:healthy", "--steps", "1", "--findings-only"]
    shown = CliRunner().invoke(main, args)
    quiet = CliRunner().invoke(main, [*args, "--no-progress"])
    assert shown.exit_code == quiet.exit_code == 0, shown.output
    assert shown.stdout == quiet.stdout
    assert shown.stderr == quiet.stderr == ""

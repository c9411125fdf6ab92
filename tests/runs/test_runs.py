"""Reading run folders: the Trainer's metrics rows and summary, torn and damaged files."""

from __future__ import annotations

import json

import pytest
from report_runs import noisy_curve, write_run

from ampkit.errors import ConfigurationError, DataError
from ampkit.runs import load_run, report


def test_a_torn_last_row_is_left_out(tmp_path):
    run = write_run(tmp_path / "a", [3.0, 2.0, 1.0])
    with open(run / "metrics.jsonl", "a") as file:
        file.write('{"step": 4, "loss": 0.')  # killed in the middle of a write
    assert load_run(run).steps == [1, 2, 3]


def test_a_damaged_row_in_the_middle_is_refused_by_line(tmp_path):
    run = write_run(tmp_path / "a", [3.0, 2.0, 1.0])
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = "not json"
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="line 2 of .* is not JSON"):
        load_run(run)


def test_a_folder_without_metrics_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="holds no metrics.jsonl"):
        load_run(tmp_path)
    with pytest.raises(ConfigurationError, match="does not exist"):
        report([tmp_path / "missing"])


def test_the_metrics_file_itself_and_a_run_without_summary_are_read(tmp_path):
    run = write_run(tmp_path / "a", noisy_curve(0, steps=30))
    (run / "summary.json").unlink()  # an unfinished run
    loaded = load_run(run / "metrics.jsonl")
    assert loaded.summary is None and loaded.label == "a" and len(loaded.rows) == 30
    assert loaded.precision == "?"


def test_null_values_become_gaps(tmp_path):
    run = write_run(tmp_path / "a", [3.0, float("inf"), 1.0])
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[1])["loss"] is None
    steps, values = load_run(run).series("loss")
    assert steps == [1, 2, 3] and values[1] != values[1]  # NaN


def test_labels_and_alignment_are_checked(tmp_path):
    run = write_run(tmp_path / "a", [3.0, 2.0])
    with pytest.raises(ConfigurationError, match="labels: 2 given for 1 runs"):
        report([run], labels=["x", "y"])
    with pytest.raises(ConfigurationError, match="align: 'epoch' is not"):
        report([run], align="epoch")
    assert report([run], labels=["mine"]).groups[0].label == "mine"


@pytest.mark.slow  # a fresh interpreter importing matplotlib
def test_a_report_imports_no_torch(tmp_path):
    import subprocess
    import sys

    run = write_run(tmp_path / "a", noisy_curve(0, steps=30))
    code = (
        "import sys, ampkit\n"
        f"ampkit.report([{str(run)!r}]).render_html()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_header_names_a_resume_that_changed_the_precision(tmp_path):
    from ampkit.runs.page import run_facts

    run = write_run(tmp_path / "a", [3.0, 2.0, 1.0])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows[2]["precision_change"] = "fp16 -> bf16"  # what the first row after such a resume holds
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    facts = dict(run_facts(load_run(run)))
    assert facts["precision changes"] == "step 3: fp16 -> bf16"
    assert facts["precision"] == "fp32" and facts["skipped steps"] == "0"

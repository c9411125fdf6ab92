"""The verdict on real short runs of the built-in job: bf16 is within the noise of fp32 on this
CPU, and a deliberately broken fp16 run (a loss scale regrown every step, so every other step
overflows and is skipped) is worse; its skipped steps are the ones marked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from report_runs import TINY

import ampkit
from ampkit.errors import PrecisionWarning
from ampkit.runs import report

pytestmark = pytest.mark.slow  # three real runs: ~10 s together on a 2-core CPU


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("runs")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is the fastest, and shares the CPU
    try:
        out = {}
        for name, settings in [
            ("fp32", {"precision": "fp32"}),
            ("bf16", {"precision": "bf16"}),
            ("broken", {"precision": "fp16", "init_scale": 2.0**24, "growth_interval": 1}),
        ]:
            config = ampkit.TrainConfig(out=str(root / name), **TINY, **settings)
            if settings["precision"] == "fp16":
                with pytest.warns(PrecisionWarning, match="fp16"):  # emulated on a CPU
                    ampkit.train(config)
            else:
                ampkit.train(config)
            out[name] = root / name
        yield out
    finally:
        torch.set_num_threads(threads)


def test_bf16_is_within_the_noise_of_fp32(runs):
    (verdict,) = report([runs["fp32"], runs["bf16"]]).verdicts
    assert verdict.verdict == "within noise", verdict
    assert verdict.noise == "curve" and verdict.steps == (1, TINY["steps"])


def test_a_broken_fp16_run_is_worse(runs):
    result = report([runs["fp32"], runs["bf16"], runs["broken"]])
    bf16, broken = result.verdicts
    assert bf16.outcome == "within"
    assert broken.outcome == "worse" and broken.z > 3, broken
    assert broken.verdict.startswith("worse by ") and broken.verdict.endswith(" sigma)")


def test_the_broken_runs_skipped_steps_are_marked(runs):
    from matplotlib.figure import Figure

    from ampkit.runs.plots import _mark_skipped

    rows = [json.loads(line) for line in (runs["broken"] / "metrics.jsonl").read_text().split()]
    skipped = [r["step"] for r in rows if r["skipped"]]
    summary = json.loads((runs["broken"] / "summary.json").read_text())
    assert len(skipped) == summary["skipped_steps"] >= 5
    result = report([runs["fp32"], runs["broken"]])
    ax = Figure().subplots()
    assert _mark_skipped(ax, result.runs[1], "loss", "step") == len(skipped)
    assert list(ax.lines[-1].get_xdata()) == skipped
    page = result.render_html()
    assert f"<th>skipped steps</th><td>{len(skipped)}</td>" in page
    assert [p.key for p in result.plots()][:3] == ["loss", "lr", "scale"]

"""The report page: self-contained, one plot per logged series, the verdict and its method,
skipped steps marked on the loss curve, and the same plots as PNG files."""

from __future__ import annotations

import html
import re
import shutil
import subprocess

import numpy as np
import pytest
from report_runs import noisy_curve, write_run

from ampkit.runs import report
from ampkit.runs.verdict import METHOD

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium on PATH (apt-get install chromium)"
)


@pytest.fixture()
def two_runs(tmp_path):
    a = write_run(tmp_path / "fp32", noisy_curve(0))
    b = write_run(tmp_path / "fp16", noisy_curve(1), precision="fp16", skipped=(3, 17, 150), seed=1)
    return a, b


def test_page_is_self_contained_with_a_plot_per_series(two_runs, tmp_path):
    result = report(two_runs)
    text = result.to_html(tmp_path / "out" / "report.html").read_text()
    assert "<script" not in text and "<link" not in text
    assert not re.search(r"""(src|href)=['"]?(https?:|//)""", text)
    keys = [p.key for p in result.plots()]
    # scale is plotted (fp16's scaler); samples/s gives way to tokens/s
    assert keys == ["loss", "lr", "scale", "grad_norm", "tokens_per_s", "step_time_ms"]
    assert text.count("src='data:image/png;base64,") == len(keys)
    assert "Convergence verdict (reference: fp32)" in text
    assert METHOD in html.unescape(text)
    assert result._repr_html_() == result.render_html()


def test_skipped_steps_are_marked_on_the_loss_curve(two_runs):
    from matplotlib.figure import Figure

    from ampkit.runs.plots import _mark_skipped
    from ampkit.runs.runs import load_run

    run = load_run(two_runs[1])
    ax = Figure().subplots()
    assert _mark_skipped(ax, run, "loss", "step") == 3
    marks = ax.lines[-1]
    assert list(marks.get_xdata()) == [3, 17, 150]
    losses = dict(zip(*run.series("loss"), strict=True))
    np.testing.assert_allclose(marks.get_ydata(), [losses[s] for s in (3, 17, 150)])


def test_png_files_are_the_page_plots(two_runs, tmp_path):
    result = report(two_runs)
    paths = result.write_pngs(tmp_path / "png")
    assert [p.name for p in paths] == [f"{p.key}.png" for p in result.plots()]
    for path, plot in zip(paths, result.plots(), strict=True):
        assert path.read_bytes() == plot.png and plot.png.startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.slow  # draws two pages of six plots each
def test_page_size_does_not_grow_with_the_steps(tmp_path):
    short = write_run(tmp_path / "short", noisy_curve(0, steps=3000))
    long = write_run(tmp_path / "long", noisy_curve(0, steps=30_000))
    size = {p.name: len(report([p], points=500).render_html()) for p in (short, long)}
    assert size["long"] < 1.5 * size["short"]


def test_aligned_by_tokens_the_axis_counts_tokens(two_runs):
    from ampkit.runs.plots import _xs

    result = report(two_runs, align="tokens")
    run = result.runs[0]
    assert result.align == "tokens" and run.tokens_per_step == 8 * 32  # batch x sequence
    assert list(_xs(run, [1, 2, 10], "tokens")) == [256, 512, 2560]
    assert list(_xs(run, [1, 2, 10], "step")) == [1, 2, 10]


@needs_chromium
def test_every_plot_decodes_in_chromium(two_runs, tmp_path):
    page = report(two_runs).to_html(tmp_path / "report.html")
    probe = tmp_path / "probe.html"
    counter = (
        "<script>window.addEventListener('load', () => { const imgs = [...document.images];"
        " document.body.dataset.decoded = imgs.filter(i => i.complete && i.naturalWidth > 0)"
        ".length + '/' + imgs.length; });</script>"
    )
    probe.write_text(page.read_text().replace("</body>", counter + "</body>"))
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    decoded, total = re.search(r'data-decoded="(\d+)/(\d+)"', dom).groups()
    assert decoded == total and int(total) == page.read_text().count("data:image/png")


@needs_chromium
def test_screenshot_shows_both_runs_curves(two_runs, tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    from ampkit.runs.plots import COLORS

    page = report(two_runs).to_html(tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    image = image_module.open(shot).convert("RGB")
    counts = {rgb: n for n, rgb in image.getcolors(maxcolors=1 << 20)}

    def pixels(hex_color: str, tolerance: int = 8) -> int:
        target = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
        return sum(
            n
            for rgb, n in counts.items()
            if all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True))
        )

    assert pixels(COLORS[0]) > 100 and pixels(COLORS[1]) > 100  # fp32 and fp16 drawn
    assert pixels("#ffffff", tolerance=0) < 0.97 * 1200 * 1600  # not a blank page

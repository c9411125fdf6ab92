"""The HTML report is self-contained and renders in headless Chromium with its plots."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from doctor_models import overflowing

import ampkit
from ampkit.doctor.html import FORMAT_COLORS

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium on PATH (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, closure = overflowing()
    report = ampkit.diagnose(model, closure, "fp16", steps=1)
    history = tuple(
        {"step": s, "scale": 2.0 ** (16 - (s > 4)), "skipped": s == 5, "loss": 2.0 / s}
        for s in range(1, 9)
    )
    return replace(report, scale_history=history).to_html(
        tmp_path_factory.mktemp("html") / "report.html"
    )


def test_page_is_self_contained(page):
    text = page.read_text()
    assert "<script" not in text and "<link" not in text
    assert not re.search(r"""(src|href)=['"]?(https?:|//)""", text)
    images = re.findall(r"src='data:image/png;base64,", text)
    rows = text.count("<figure>")
    assert rows == len(
        ampkit.diagnose(*overflowing(), "fp16", steps=1, with_precision_map=False).rows
    )
    assert len(images) == rows + 1  # one per module, plus the loss-scale history
    assert "mid (Linear) <span class='bad'>(finding)</span>" in text


def _chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={user_data}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@needs_chromium
def test_every_plot_decodes_in_chromium(page, tmp_path):
    probe = tmp_path / "probe.html"
    counter = (
        "<script>window.addEventListener('load', () => { const imgs = [...document.images];"
        " document.body.dataset.decoded = imgs.filter(i => i.complete && i.naturalWidth > 0)"
        ".length + '/' + imgs.length; });</script>"
    )
    probe.write_text(page.read_text().replace("</body>", counter + "</body>"))
    dom = _chromium(
        "--virtual-time-budget=10000", "--dump-dom", probe.as_uri(), user_data=tmp_path / "profile"
    ).stdout
    decoded, total = re.search(r'data-decoded="(\d+)/(\d+)"', dom).groups()
    assert decoded == total and int(total) == page.read_text().count("data:image/png")


@needs_chromium
def test_screenshot_shows_the_format_ranges_and_the_histograms(page, tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    shot = tmp_path / "shot.png"
    _chromium(
        f"--screenshot={shot}",
        "--window-size=1200,1600",
        page.as_uri(),
        user_data=tmp_path / "profile",
    )
    image = image_module.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    colors = image.getcolors(maxcolors=1 << 20)
    counts = {rgb: n for n, rgb in colors}

    def pixels(hex_color: str, tolerance: int = 8) -> int:
        target = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
        return sum(
            n
            for rgb, n in counts.items()
            if all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True))
        )

    for name in ("fp16", "bf16", "fp8_e4m3"):
        assert pixels(FORMAT_COLORS[name]) > 500, name  # the range bars are drawn
    assert pixels("#555555") > 500  # the magnitude histograms are drawn
    white = pixels("#ffffff", tolerance=0)
    assert white < 0.95 * 1200 * 1600  # not a blank page


def test_histograms_are_log_scaled_so_a_small_tail_shows():
    from matplotlib.figure import Figure

    from ampkit.doctor.html import _panel
    from ampkit.doctor.rows import PhaseRow
    from ampkit.precision.stats import HIST_BINS, HIST_MIN_EXPONENT

    model, closure = overflowing()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, with_precision_map=False)
    hist = [0] * HIST_BINS
    hist[-HIST_MIN_EXPONENT], hist[16 - HIST_MIN_EXPONENT] = 998, 2  # 0.2% past fp16's max
    stats = PhaseRow(
        count=1000, zeros=0, nonfinite=0, max_abs=2.0**20, min_abs=1.0, fits={}, hist=tuple(hist)
    )
    ax = Figure().subplots()
    _panel(ax, report, "forward", stats)
    low, high = ax.get_ylim()
    assert ax.get_yscale() == "log"
    assert low < 0.002 / 2 and high > 0.998  # the tail's bar spans over half a decade


def test_the_notebook_shows_the_same_page(page):
    """``_repr_html_`` (Jupyter's inline display) is the page ``to_html`` writes."""
    model, closure = overflowing()
    report = ampkit.diagnose(model, closure, "fp16", steps=1)
    inline = report._repr_html_()
    assert inline.startswith("<!DOCTYPE html>") and "<h1>ampkit doctor: fp16" in inline
    assert "Recommendation" in inline and "<script" not in inline

"""The comparison page: self-contained, the first module and the contributors named, the same
page in a notebook, and every image decoded in Chromium (skipped without it)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch
from torch import nn

import ampkit
from ampkit.errors import PrecisionWarning

CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def overflow() -> ampkit.CompareReport:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        model[2].weight.mul_(1e6)
    batch = (torch.randn(4, 8), torch.randint(0, 4, (4,)))
    with pytest.warns(PrecisionWarning):
        return ampkit.compare(
            model, "fp32", "fp16", batch=batch, loss_fn=nn.functional.cross_entropy
        )


def test_page_names_the_first_module_and_is_self_contained(overflow, tmp_path):
    text = overflow.to_html(tmp_path / "compare.html").read_text()
    assert "<script" not in text and "<link" not in text
    assert not re.search(r"""(src|href)=['"]?(https?:|//)""", text)
    assert "first parts at 2 (out0): non-finite in fp16" in text
    assert "<h2>Largest contributors</h2>" in text and text.count("data:image/png") == 1
    assert overflow._repr_html_() == overflow.render_html()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium on PATH")
def test_the_plot_decodes_in_chromium(overflow, tmp_path):
    probe = tmp_path / "probe.html"
    counter = (
        "<script>window.addEventListener('load', () => { const imgs = [...document.images];"
        " document.body.dataset.decoded = imgs.filter(i => i.complete && i.naturalWidth > 0)"
        ".length + '/' + imgs.length; });</script>"
    )
    probe.write_text(overflow.render_html().replace("</body>", counter + "</body>"))
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
    assert re.search(r'data-decoded="1/1"', dom)

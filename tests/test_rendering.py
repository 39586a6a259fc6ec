"""The built book (_build/html) keeps what the kernel-less page needs: widget state and bertviz.

These tests read the HTML that `jupyter-book build` writes; they do not build the book (a build
takes minutes and `make test` builds it anyway, after the unit tests). So they run AFTER the build:

    .venv/bin/jupyter-book build -W -n --keep-going .
    .venv/bin/python -m pytest tests/test_rendering.py

When the page of a chapter is missing, or older than its notebook (a stale build), the tests are
skipped and say so. The screenshot test needs a headless Chromium at /usr/bin/chromium and is
skipped without one. Set RENDERING_SCREENSHOT_DIR to keep the screenshot.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html" / "chapters"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def page(stem: str) -> str:
    """The built page of chapter `stem`, or skip (with the reason) if it is missing or stale."""
    html, notebook = HTML / f"{stem}.html", ROOT / "chapters" / f"{stem}.ipynb"
    if not html.is_file():
        pytest.skip(f"{html.relative_to(ROOT)} is missing: build the book first "
                    "(jupyter-book build -W -n --keep-going .), then run these tests")
    if notebook.is_file() and html.stat().st_mtime < notebook.stat().st_mtime:
        pytest.skip(f"{html.relative_to(ROOT)} is older than {notebook.relative_to(ROOT)}: rebuild the book")
    return html.read_text(encoding="utf-8")


@pytest.mark.parametrize("stem", ["06_masked_lm", "09_inside_the_model"])
def test_page_keeps_the_widget_state(stem):
    text = page(stem)
    # The saved state of every widget, and a view that points into it: the page shows the last view.
    assert f'<script type="{WIDGET_STATE}">' in text
    assert f'<script type="{WIDGET_VIEW}">' in text


def test_chapter_9_keeps_the_explorer_picture():
    text = page("09_inside_the_model")
    state = text.split(f'<script type="{WIDGET_STATE}">', 1)[1].split("</script>", 1)[0]
    assert "OutputModel" in state and "image/png" in state  # the explorer's heatmap and arcs
    assert "DropdownModel" in state and "IntSliderModel" in state


def test_chapter_9_keeps_the_bertviz_views():
    text = page("09_inside_the_model")
    # The head view and the model view of MiniLM and of our tiny model: four views, each an output
    # (the code cell shows the same markup escaped, as &lt;div) with its container.
    views = text.count('<div class="bertviz-output"')
    assert views == 4
    assert text.count('id="bertviz-') >= views
    assert "require.min.js" in text and "requirejs(['jquery', 'd3']" in text
    assert "PYTHON_PARAMS" not in text  # the parameters were filled in


def test_chapter_8_keeps_its_tables_and_figures():
    text = page("08_pretraining")
    # The fill-mask table and the time/throughput table are Markdown outputs: real HTML tables.
    assert text.count("<table") >= 3  # the recipe table of the prose, and the two computed tables
    assert "paris is the capital of" in text and "tokens/s" in text
    # The schedule, the recipe runs, the learning curves and the cosine matrices, as embedded images.
    assert text.count("<img") >= 4
    assert "{glue:" not in text  # every glued number was filled in


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no headless Chromium at /usr/bin/chromium")
@pytest.mark.parametrize("stem", ["08_pretraining", "09_inside_the_model"])
def test_chapter_screenshot(stem, tmp_path):
    page(stem)  # skips when the build is missing or stale
    from PIL import Image

    shot = tmp_path / f"{stem}.png"
    cmd = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
           f"--screenshot={shot}", "--window-size=1280,6000", "--virtual-time-budget=5000",
           (HTML / f"{stem}.html").as_uri()]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), f"chromium wrote no screenshot: {result.stderr[-2000:]}"
    image = Image.open(shot).convert("L")
    assert image.size == (1280, 6000)
    # A rendered page, not a blank one: dark text and figures on a light background.
    histogram = image.histogram()
    dark = sum(histogram[:128]) / (image.size[0] * image.size[1])
    assert 0.002 < dark < 0.5, f"{100 * dark:.2f}% dark pixels"
    keep = os.environ.get("RENDERING_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)

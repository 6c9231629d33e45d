"""The documentation site shows every notebook with its committed outputs (myst-nb, docs/conf.py).

The site is built once here (as ``scripts/dev/build_docs.sh`` builds it: warnings are errors)
into a temporary folder. Without JavaScript a reader sees each figure's PNG copy; in Chromium
the same page draws every figure with plotly.js, served from the site itself.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PLOTLY = "application/vnd.plotly.v1+json"


def _figures(path: Path) -> int:
    return sum(PLOTLY in o.get("data", {}) for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", []))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n", "-q",
                          "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, f"the docs build warned or failed:\n{run.stderr[-4000:]}"
    return out / "html"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_has_a_page_with_its_outputs(site, notebook):
    page = site / "notebooks" / f"{notebook.stem}.html"
    assert page.exists(), f"no page for {notebook.name}"
    text = page.read_text()
    n = _figures(notebook)
    # Without JavaScript: the PNG copy of every figure; with it: the interactive figure.
    assert text.count('<noscript><img src="data:image/png;base64,') == n
    assert len(re.findall(r"Plotly\.newPlot\(", text)) == n
    if n:
        assert "_static/plotly.min.js" in text
    assert 'class="cell_output' in text, "no cell output on the page"  # the committed outputs are shown
    assert "notebooks/" + notebook.stem in (site / "notebooks.html").read_text()


def test_plotly_js_is_served_by_the_site_only_on_notebook_pages(site):
    assert (site / "_static" / "plotly.min.js").stat().st_size > 1_000_000
    assert "plotly.min.js" not in (site / "index.html").read_text()


@pytest.mark.browser
def test_the_figures_draw_in_a_browser(site, browser):
    notebook = ROOT / "notebooks" / "01_single_pass_drafting.ipynb"
    page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    try:
        page.goto((site / "notebooks" / f"{notebook.stem}.html").as_uri(), wait_until="load")
        page.wait_for_function("n => document.querySelectorAll('.js-plotly-plot .main-svg').length >= n",
                               arg=_figures(notebook), timeout=60_000)
    finally:
        page.context.close()

"""Notebook 2 in a real browser: JupyterLab runs it, a plotly figure and sliders render, a slider redraws.

Run alone with ``.venv/bin/python -m pytest tests/browser -s`` (``-s`` shows the timings and
the screenshot path). The screenshot goes to ``$PEAGLE_LAB_SCREENSHOT`` (default
``ci-artifacts/notebook2.png``); CI keeps it as an artifact.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "02_masked_input_construction.ipynb"
RUN_ALL_S = 240  # the notebook takes ~15 s on 2 cores; JupyterLab and widgets add their own start-up
STEP_S = 60

pytestmark = pytest.mark.browser

# The figure of the DraftBatchExplorer: the plotly plot inside a widget Output area.
EXPLORER_PLOT = ".jupyter-widgets.widget-output .js-plotly-plot"


def _screenshot_path() -> Path:
    path = Path(os.environ.get("PEAGLE_LAB_SCREENSHOT", ROOT / "ci-artifacts" / "notebook2.png"))
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _figure_state(page) -> dict:
    """Title and cell grid of the explorer's plotly figure, read from plotly's graph div."""
    return page.eval_on_selector(
        EXPLORER_PLOT, "gd => ({title: gd.layout.title.text, z: gd.data[0].z})")


def _fail(page, lab, what: str) -> None:
    shot = _screenshot_path().with_name("notebook2-failure.png")
    try:
        page.screenshot(path=str(shot), full_page=True)
    except Exception as e:  # the page may be gone; the message matters more than the picture
        shot = f"(no screenshot: {e})"
    pytest.fail(f"{what}\nscreenshot: {shot}\nJupyterLab log (tail):\n{lab.log_tail()}", pytrace=False)


def _step(page, lab, what: str, fn, timings: dict):
    """Run one browser step; on timeout or error, fail with what was being waited for."""
    t0 = time.monotonic()
    try:
        out = fn()
    except Exception as e:
        _fail(page, lab, f"browser step failed: {what}: {type(e).__name__}: {str(e).splitlines()[0]}")
    timings[what] = time.monotonic() - t0
    return out


def _menu(page, menu: str, item: str) -> None:
    page.click(f".lm-MenuBar-itemLabel:text-is('{menu}')", timeout=STEP_S * 1000)
    page.click(f".lm-Menu-itemLabel:text-is('{item}')", timeout=STEP_S * 1000)


def test_notebook2_runs_and_its_slider_redraws_the_figure(lab, browser):
    t_start = time.monotonic()
    timings: dict[str, float] = {}
    name = lab.serve(NOTEBOOK)
    n_code = sum(c["cell_type"] == "code" for c in json.loads(NOTEBOOK.read_text())["cells"])
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(STEP_S * 1000)
    try:
        _step(page, lab, "open the notebook in JupyterLab", lambda: (
            page.goto(f"{lab.url}/lab/tree/{name}?token={lab.token}", wait_until="domcontentloaded",
                      timeout=STEP_S * 1000),
            # Cells render progressively: wait for all of them, and for the kernel.
            page.wait_for_function(
                "n => document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell').length === n", arg=n_code),
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=STEP_S * 1000),
        ), timings)
        # Start from a blank notebook, so everything checked below was produced in this browser.
        _step(page, lab, "clear all outputs", lambda: (
            _menu(page, "Edit", "Clear Outputs of All Cells"),
            page.wait_for_function("document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot').length === 0"),
        ), timings)
        _step(page, lab, f"run all {n_code} code cells", lambda: (
            _menu(page, "Run", "Run All Cells"),
            page.wait_for_function(
                """n => {
                    const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')];
                    return prompts.length === n && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
                }""", arg=n_code, timeout=RUN_ALL_S * 1000),
        ), timings)
        errors = page.locator(".jp-NotebookPanel [data-mime-type='application/vnd.jupyter.error']")
        if errors.count():
            _fail(page, lab, f"a cell raised an error in the browser:\n{errors.first.inner_text()[:2000]}")

        _step(page, lab, "plotly figures render", lambda: page.wait_for_function(
            "document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot .main-svg').length >= 3"), timings)
        slider = page.locator(".widget-slider:has(label:text-is('K (draft tokens)'))")
        handle = slider.locator(".noUi-handle")
        _step(page, lab, "the K slider and the explorer's figure render", lambda: (
            handle.wait_for(state="visible"), page.wait_for_selector(EXPLORER_PLOT + " .main-svg")), timings)
        before = _figure_state(page)
        if "K=3" not in before["title"] or len(before["z"][0]) != 6:
            _fail(page, lab, f"the explorer did not start at K=3 with 6 slots: {json.dumps(before)[:500]}")
        handle.scroll_into_view_if_needed()

        # Two steps right: K 3 -> 5. The slider reports on release (continuous_update=False).
        _step(page, lab, "move the K slider to 5", lambda: (
            handle.focus(), handle.press("ArrowRight"), handle.press("ArrowRight"),
            page.wait_for_function(
                """sel => { const gd = document.querySelector(sel);
                            return gd && gd.layout && gd.layout.title.text.includes('K=5'); }""",
                arg=EXPLORER_PLOT, timeout=STEP_S * 1000),
        ), timings)
        after = _figure_state(page)
        if after == before or len(after["z"][0]) != 10:
            _fail(page, lab, f"moving the slider did not redraw the figure as expected: "
                             f"before {json.dumps(before)[:300]}, after {json.dumps(after)[:300]}")
        shot = _screenshot_path()
        page.locator(EXPLORER_PLOT).scroll_into_view_if_needed()
        page.screenshot(path=str(shot))
        timings["total"] = time.monotonic() - t_start
        print(f"\nbrowser test screenshot: {shot}")
        print("browser test timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    finally:
        context.close()

"""Every notebook with a widget, in a real browser: JupyterLab runs it, its figures render, a control redraws.

A widget notebook is one whose code imports ``ipywidgets`` or ``peagle_lab.lab.widgets``; each
is found anew, so a new one is covered without editing this file. For each, in one shared
JupyterLab and one Chromium:

1. open a copy, clear every output, run all cells; no cell may raise, and at least as many
   plotly figures must render as the committed notebook holds;
2. if the notebook's code builds a live figure redrawn by the running code (``LiveFigure``,
   ``TrainingMonitor``), check that one was redrawn in place while the cells ran;
3. if a widget shows a figure beside sliders (``DraftBatchExplorer``, any explorer built the
   same way), move the first slider of the first such widget one step and check that its
   figure changed (title, traces or data); a notebook must pass at least one of 2 and 3;
4. save a screenshot to ``$PEAGLE_LAB_SCREENSHOT_DIR/<notebook>.png`` (default ``ci-artifacts/``).

Run alone with ``.venv/bin/python -m pytest tests/browser -s`` (``-s`` shows the timings).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLOTLY = "application/vnd.plotly.v1+json"
RUN_ALL_S = 420  # the slowest widget notebook takes ~1 min on 2 cores; JupyterLab and widgets add start-up
STEP_S = 60
_WIDGET_IMPORT = re.compile(r"^\s*(import ipywidgets|from ipywidgets |from peagle_lab\.lab\.widgets import"
                            r"|from peagle_lab\.lab import .*\bwidgets\b)", re.MULTILINE)
_LIVE_FIGURE = re.compile(r"\b(LiveFigure|TrainingMonitor)\(")

NEWS_QUESTION = "official Jupyter news"  # JupyterLab's toast: "Would you like to get notified about official Jupyter news?"

pytestmark = pytest.mark.browser


def test_the_project_jupyterlab_asks_nothing_about_news(lab):
    """The override that scripts/setup.sh installs is what JupyterLab serves: no news question, no update checks."""
    import urllib.request

    url = f"{lab.url}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={lab.token}"
    with urllib.request.urlopen(url, timeout=30) as r:
        served = json.loads(r.read())
    defaults = {k: served["schema"]["properties"][k].get("default") for k in ("fetchNews", "checkForUpdates")}
    assert defaults == {"fetchNews": "false", "checkForUpdates": False}, defaults  # overrides.json sets the defaults
    assert "fetchNews" not in served["settings"], served["settings"]  # and no user setting stands in for it
    installed = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert json.loads(installed.read_text()) == json.loads((ROOT / "scripts" / "jupyterlab" / "overrides.json").read_text())


def widget_notebooks() -> list[Path]:
    """The notebooks under notebooks/ whose code imports a widget module."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        if any(_WIDGET_IMPORT.search("".join(c["source"])) for c in cells if c["cell_type"] == "code"):
            found.append(path)
    return found


def _screenshot_dir() -> Path:
    path = Path(os.environ.get("PEAGLE_LAB_SCREENSHOT_DIR", ROOT / "ci-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


# A figure's state, read from plotly's graph div: enough to tell that it was redrawn with new content.
_STATE_JS = """gd => JSON.stringify({title: gd.layout && gd.layout.title && gd.layout.title.text,
                                    data: (gd.data || []).map(t => [t.name, t.x, t.y, t.z])})"""
# While the cells run, remember every state each output's figure shows (a live figure is
# re-rendered in place, so its output area keeps its position and its figure changes).
_TRACK_JS = """() => {
    window.__figureStates = {};
    window.__figureTracker = setInterval(() => {
        document.querySelectorAll('.jp-NotebookPanel .jp-Cell').forEach((cell, ci) => {
            cell.querySelectorAll('.jp-OutputArea-child').forEach((out, oi) => {
                const gd = out.querySelector('.js-plotly-plot');
                if (!gd || !gd.data) return;
                const s = JSON.stringify((gd.data || []).map(t => [t.x, t.y, t.z]));
                const key = ci + ':' + oi;
                (window.__figureStates[key] = window.__figureStates[key] || []);
                const seen = window.__figureStates[key];
                const sig = s.length + ':' + s.slice(-300);
                if (!seen.includes(sig)) seen.push(sig);
            });
        });
    }, 200);
}"""


class Session:
    """One notebook in the browser; every step is timed and fails with a screenshot and the server log."""

    def __init__(self, page, lab, notebook: Path):
        self.page, self.lab, self.notebook = page, lab, notebook
        self.timings: dict[str, float] = {}

    def fail(self, what: str) -> None:
        shot = _screenshot_dir() / f"{self.notebook.stem}-failure.png"
        try:
            self.page.screenshot(path=str(shot), full_page=True)
        except Exception as e:  # the page may be gone; the message matters more than the picture
            shot = f"(no screenshot: {e})"
        pytest.fail(f"{self.notebook.name}: {what}\nscreenshot: {shot}\nJupyterLab log (tail):\n{self.lab.log_tail()}",
                    pytrace=False)

    def step(self, what: str, fn):
        t0 = time.monotonic()
        try:
            out = fn()
        except Exception as e:
            self.fail(f"browser step failed: {what}: {type(e).__name__}: {str(e).splitlines()[0]}")
        self.timings[what] = time.monotonic() - t0
        return out

    def menu(self, menu: str, item: str) -> None:
        self.page.click(f".lm-MenuBar-itemLabel:text-is('{menu}')", timeout=STEP_S * 1000)
        self.page.click(f".lm-Menu-itemLabel:text-is('{item}')", timeout=STEP_S * 1000)


def _open_and_run(s: Session, n_code: int, n_figures: int) -> None:
    page, lab = s.page, s.lab
    name = lab.serve(s.notebook)
    s.step("open the notebook in JupyterLab", lambda: (
        # A workspace of its own: JupyterLab would otherwise reopen the previous notebooks' tabs too.
        page.goto(f"{lab.url}/lab/workspaces/{s.notebook.stem}/tree/{name}?token={lab.token}",
                  wait_until="domcontentloaded", timeout=STEP_S * 1000),
        # Cells render progressively: wait for all of them, and for the kernel.
        page.wait_for_function(
            "n => document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell').length === n", arg=n_code),
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=STEP_S * 1000),
    ))
    # Start from a blank notebook, so everything checked below was produced in this browser.
    s.step("clear all outputs", lambda: (
        s.menu("Edit", "Clear Outputs of All Cells"),
        page.wait_for_function("document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot').length === 0"),
    ))
    page.evaluate(_TRACK_JS)
    s.step(f"run all {n_code} code cells", lambda: (
        s.menu("Run", "Run All Cells"),
        page.wait_for_function(
            """n => {
                const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')];
                return prompts.length === n && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
            }""", arg=n_code, timeout=RUN_ALL_S * 1000, polling=500),
    ))
    page.evaluate("clearInterval(window.__figureTracker)")
    errors = page.locator(".jp-NotebookPanel [data-mime-type='application/vnd.jupyter.error']")
    if errors.count():
        s.fail(f"a cell raised an error in the browser:\n{errors.first.inner_text()[:2000]}")
    s.step(f"{n_figures} plotly figures render", lambda: page.wait_for_function(
        "n => document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot .main-svg').length >= n",
        arg=n_figures))
    news = page.get_by_text(NEWS_QUESTION)  # by now (minutes after loading) the toast would be up
    if news.count():
        s.fail(f"JupyterLab asked about news over the notebook: {news.first.inner_text()[:200]!r} "
               "(scripts/setup.sh installs scripts/jupyterlab/overrides.json to stop it)")


def _move_first_slider(s: Session, area) -> str:
    """Move the first slider of a widget that shows a figure; check that figure changed. Returns what moved."""
    page = s.page
    plot, slider = area.locator(".widget-output .js-plotly-plot").first, area.locator(".widget-slider").first
    handle = slider.locator(".noUi-handle")
    s.step("the widget's slider and figure render", lambda: (
        handle.wait_for(state="visible"), plot.locator(".main-svg").first.wait_for(state="visible")))
    label = slider.locator("label").first.inner_text() if slider.locator("label").count() else "slider"
    before = plot.evaluate(_STATE_JS)
    at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
    key = "ArrowLeft" if at_max else "ArrowRight"
    handle.scroll_into_view_if_needed()
    # The slider reports on release (continuous_update=False); a key press is one step and a release.
    s.step(f"move the slider '{label}' one step", lambda: (
        handle.focus(), handle.press(key),
        area.locator(".widget-output .js-plotly-plot").first.wait_for(state="attached"),
        page.wait_for_function(
            """([el, before]) => { const gd = el.querySelector('.widget-output .js-plotly-plot');
                                   return gd && gd.data && (%s)(gd) !== before; }""" % _STATE_JS,
            arg=[area.element_handle(), before], timeout=STEP_S * 1000),
    ))
    plot.scroll_into_view_if_needed()
    return f"moved '{label}' ({key}); the figure redrew"


# Found by this test (December 2026): JupyterLab hands an update_display_data of the same mimetype to the
# renderer on screen, and plotly's renderer ignores a new model once it has drawn, so a LiveFigure kept its
# first frame. LiveFigure now sends a spacer of another mimetype before each frame; step 3 guards that.


def _live_figure_redrew(s: Session) -> str:
    states = s.page.evaluate("window.__figureStates")
    redrawn = sorted(k for k, v in states.items() if len(v) >= 2)
    if not redrawn:
        return ""
    cell = int(redrawn[0].split(":")[0])
    s.page.locator(".jp-NotebookPanel .jp-Cell").nth(cell).scroll_into_view_if_needed()
    return f"live figure(s) redrawn in place in cell(s) {[int(k.split(':')[0]) for k in redrawn]}"


@pytest.mark.parametrize("notebook", widget_notebooks(), ids=lambda p: p.stem)
def test_widget_notebook_runs_and_its_figure_responds(notebook, lab, browser):
    t_start = time.monotonic()
    cells = json.loads(notebook.read_text())["cells"]
    n_code = sum(c["cell_type"] == "code" for c in cells)
    n_figures = sum(PLOTLY in o.get("data", {}) for c in cells for o in c.get("outputs", []))
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(STEP_S * 1000)
    s = Session(page, lab, notebook)
    try:
        _open_and_run(s, n_code, n_figures)
        verdicts = []
        if any(_LIVE_FIGURE.search("".join(c["source"])) for c in cells if c["cell_type"] == "code"):
            live = _live_figure_redrew(s)
            if not live:
                s.fail("its live figure (LiveFigure, TrainingMonitor) was never redrawn in place while the cells ran")
            verdicts.append(live)
        area = page.locator(".jp-OutputArea-output:has(.widget-output .js-plotly-plot):has(.widget-slider)").first
        if area.count():
            verdicts.append(_move_first_slider(s, area))
        verdict = "; ".join(verdicts)
        shot = _screenshot_dir() / f"{notebook.stem}.png"
        page.screenshot(path=str(shot))
        s.timings["total"] = time.monotonic() - t_start
        print(f"\n{notebook.name}: {verdict or 'no figure redrew'}; screenshot {shot}")
        print("  timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in s.timings.items()))
        if not verdict:
            s.fail("neither a live figure nor a slider beside a figure: nothing was checked")
    finally:
        context.close()
        lab.shutdown_kernels()

"""Static PNG copies of the plotly figures in committed notebooks, for viewers without JavaScript.

JupyterLab draws a figure from plotly's own output (``application/vnd.plotly.v1+json``);
GitHub, nbviewer and a plain ``nbconvert`` show nothing for it. :func:`add_pngs` adds an
``image/png`` copy beside every such output of a saved notebook, drawn by ``kaleido``
(plotly's exporter) in a headless Chromium, so a committed notebook reads everywhere while
JupyterLab still shows the interactive figure. It works on the saved file, after the
notebook ran, so no kernel ever starts a browser: ``scripts/dev/notebook_pngs.py`` runs it
over ``notebooks/``, and ``--check`` (a test) says which figures lack their copy.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import warnings
from pathlib import Path

__all__ = ["PLOTLY", "add_pngs", "add_pngs_to_file", "browser_path", "missing_pngs"]

PLOTLY = "application/vnd.plotly.v1+json"
_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def browser_path() -> str | None:
    """The Chromium kaleido will drive: ``$BROWSER_PATH``, else the first one on ``PATH``."""
    env = os.environ.get("BROWSER_PATH")
    if env and os.path.exists(env):
        return env
    return next((p for p in map(shutil.which, _BROWSERS) if p), None)


def _figure_outputs(nb: dict):
    """``(cell index, output)`` of every output holding a plotly figure."""
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if PLOTLY in out.get("data", {}):
                yield i, out


def missing_pngs(nb: dict) -> list[int]:
    """Indices of the cells with a plotly figure but no PNG copy beside it."""
    return sorted({i for i, out in _figure_outputs(nb) if "image/png" not in out["data"]})


def add_pngs(nb: dict, *, force: bool = False) -> int:
    """Add a PNG copy to every plotly output of ``nb`` (a parsed .ipynb) in place; returns how many.

    Outputs that already carry one keep it unless ``force``. The figure is drawn at its own
    layout size (900 × 500 when it sets none).

    Raises:
        RuntimeError: kaleido or a Chromium is missing (install the ``notebook`` extra and
            ``scripts/dev/install_browser.sh``, or point ``$BROWSER_PATH`` at a Chrome).
    """
    todo = [out for _, out in _figure_outputs(nb) if force or "image/png" not in out["data"]]
    if not todo:
        return 0
    browser = browser_path()
    try:
        import kaleido
        import plotly.io as pio
    except ImportError as e:
        raise RuntimeError(f"PNG copies need kaleido and plotly (the notebook extra): {e}") from None
    if browser is None:
        raise RuntimeError("PNG copies need a Chromium or Chrome: none on PATH and $BROWSER_PATH unset "
                           "(bash scripts/dev/install_browser.sh installs Debian's)")
    os.environ.setdefault("BROWSER_PATH", browser)  # where kaleido's choreographer looks first
    kaleido.start_sync_server(silence_warnings=True)  # one browser for every figure
    try:
        for out in todo:
            layout = out["data"][PLOTLY].get("layout", {})
            with warnings.catch_warnings():  # plotly notes that the server ignores per-call options
                warnings.filterwarnings("ignore", message="The kopts argument is ignored")
                png = pio.to_image(out["data"][PLOTLY], format="png", width=layout.get("width") or 900,
                                   height=layout.get("height") or 500)
            out["data"]["image/png"] = base64.b64encode(png).decode()
    finally:
        _stop(kaleido)
    return len(todo)


def _stop(kaleido, timeout_s: float = 20.0) -> None:
    """Close kaleido's browser within ``timeout_s`` (its own close waits without a deadline)."""
    closer = threading.Thread(target=kaleido.stop_sync_server, kwargs={"silence_warnings": True}, daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        warnings.warn(f"kaleido's browser did not close within {timeout_s:.0f} s; leaving it", stacklevel=2)


def add_pngs_to_file(path: str | Path, *, force: bool = False) -> int:
    """:func:`add_pngs` on a saved notebook, rewritten in place (nbformat's JSON layout kept)."""
    path = Path(path)
    nb = json.loads(path.read_text())
    n = add_pngs(nb, force=force)
    if n:
        tmp = path.with_suffix(".ipynb.tmp")
        tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        tmp.replace(path)
    return n

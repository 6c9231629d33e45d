"""The committed notebooks' figures carry static PNG copies (peagle_lab.lab.static)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from peagle_lab.lab import static

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_committed_figure_has_a_png_copy(path):
    """Re-executed a notebook? Run scripts/dev/notebook_pngs.py before committing it."""
    assert static.missing_pngs(json.loads(path.read_text())) == []


def test_the_notebooks_do_have_figures():
    assert sum(1 for p in NOTEBOOKS for _ in static._figure_outputs(json.loads(p.read_text()))) >= 20


def _figure_notebook(width: int) -> dict:
    pytest.importorskip("plotly")
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 2]), layout=dict(width=width, height=200))
    return {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {static.PLOTLY: fig.to_plotly_json(), "text/plain": "Figure"}},
        {"output_type": "stream", "name": "stdout", "text": "not a figure"}]}]}


def test_missing_pngs_names_the_cells():
    nb = _figure_notebook(320)
    assert static.missing_pngs(nb) == [0]
    nb["cells"][0]["outputs"][0]["data"]["image/png"] = "x"
    assert static.missing_pngs(nb) == []
    assert static.add_pngs(nb) == 0  # nothing to do: no browser started


@pytest.mark.skipif(static.browser_path() is None, reason="no Chromium here (CI installs it: scripts/dev/install_browser.sh)")
def test_add_pngs_draws_each_figure_at_its_own_size():
    pytest.importorskip("kaleido")
    nb = _figure_notebook(320)
    assert static.add_pngs(nb) == 1
    png = base64.b64decode(nb["cells"][0]["outputs"][0]["data"]["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 320  # IHDR width: the figure's own
    assert "image/png" not in nb["cells"][0]["outputs"][1].get("data", {})


def test_without_a_browser_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(static, "browser_path", lambda: None)
    with pytest.raises(RuntimeError, match="install_browser.sh"):
        static.add_pngs(_figure_notebook(300))

"""The notebooks' run times: measured by scripts/dev/time_notebooks.py into committed JSON, shown by the pages'
generated blocks (docs/workshop.md, docs/notebooks.md, README.md's notebook map), which must match it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from peagle_lab.testing import script_module

ROOT = Path(__file__).resolve().parents[1]
times = script_module("dev/time_notebooks.py")


def test_every_notebook_is_timed_with_its_provenance():
    doc = json.loads(times.JSON.read_text())
    assert [r["notebook"] for r in doc["notebooks"]] == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    for key in ("device", "torch", "python", "command", "commit", "date", "omp_num_threads"):
        assert doc["run_info"].get(key), key
    for row in doc["notebooks"]:
        assert row["seconds"] > 0 and all(s is None or s >= 0 for s in row["cell_seconds"]), row


def test_the_pages_show_the_committed_times():
    """Stale pages fail here: rebuild them with `python scripts/dev/time_notebooks.py --pages-only`."""
    assert times.main(["--check"]) == 0
    block = times.render(json.loads(times.JSON.read_text()))
    for page in times.PAGES:
        if page != times.README:
            assert block in page.read_text(), page


def test_the_readme_map_carries_each_notebooks_measured_minutes():
    """Stale minutes fail here: rebuild with `python scripts/dev/time_notebooks.py --pages-only`."""
    assert times.README in times.PAGES
    doc = json.loads(times.JSON.read_text())
    readme = times.README.read_text()
    block = readme.split(times.MAP_BEGIN, 1)[1].split(times.MAP_END, 1)[0]
    minutes = dict(re.findall(r"^\| `(\d\d_\w+)` \|.*\| ([^|]+) \|$", block, flags=re.MULTILINE))
    assert minutes == {r["notebook"].removesuffix(".ipynb"): f"{r['seconds'] / 60:.1f}" if r["seconds"] >= 3
                       else "< 0.1" for r in doc["notebooks"]}
    assert doc["run_info"]["device"] in block and "docs/results/cpu/notebook_times.json" in block


def test_the_readme_map_keeps_its_hand_written_cells_and_refuses_a_notebook_without_a_row(tmp_path):
    doc = {"run_info": {"device": "CPU (x86_64, 2 cores)"},
           "notebooks": [{"notebook": "01_a.ipynb", "seconds": 90.0}, {"notebook": "02_b.ipynb", "seconds": 30.0}]}
    page = tmp_path / "README.md"
    page.write_text(f"intro\n{times.MAP_BEGIN}\n| notebook | what it teaches |\n| --- | --- |\n"
                    f"| `02_b` | masks, slot by slot |\n| `01_a` | one step |\n{times.MAP_END}\nafter\n")
    block = times.render_map(doc, page.read_text())
    assert block.splitlines()[:4] == [*times.MAP_HEADER, "| `01_a` | one step | 1.5 |", "| `02_b` | masks, slot by slot | 0.5 |"]
    assert times.rewrite(page, block, times.MAP_BEGIN, times.MAP_END) == \
        f"intro\n{times.MAP_BEGIN}\n{block}\n{times.MAP_END}\nafter\n"
    with pytest.raises(ValueError, match="no row for 03_c"):
        times.render_map({**doc, "notebooks": [*doc["notebooks"], {"notebook": "03_c.ipynb", "seconds": 5.0}]},
                         page.read_text())


def test_render_and_rewrite(tmp_path):
    doc = {"run_info": {"device": "CPU (x86_64, 2 cores)", "torch": "2.13.0", "python": "3.11.7",
                        "load_average_before": 1.04},
           "notebooks": [{"notebook": "01_a.ipynb", "seconds": 12.3, "cell_seconds": [4.0, None, 7.5]},
                         {"notebook": "02_b.ipynb", "seconds": 47.9, "cell_seconds": []}]}
    block = times.render(doc)
    assert "| 01_a | 12 s | code cell 3: 7.5 s |" in block and "| 02_b | 48 s | — |" in block
    assert "All 2 in 1.0 min on CPU (x86_64, 2 cores)" in block
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{times.BEGIN}\nold\n{times.END}\nafter\n")
    assert times.rewrite(page, block) == f"intro\n{times.BEGIN}\n{block}\n{times.END}\nafter\n"
    page.write_text("no block here\n")
    with pytest.raises(ValueError, match="has no"):
        times.rewrite(page, block)


def test_time_notebook_runs_a_notebook_without_writing_it(tmp_path):
    nb = tmp_path / "tiny.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "id": "a", "metadata": {}, "source": "x = 1 + 1",
                                         "outputs": [], "execution_count": None}],
                              "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                          "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}))
    before = nb.read_text()
    row = times.time_notebook(nb)
    assert row["notebook"] == "tiny.ipynb" and row["seconds"] > 0 and len(row["cell_seconds"]) == 1
    assert nb.read_text() == before

"""docs/kernels.md's H200 timings: the ``kernels-prep`` and ``kernels-attention`` blocks are what
scripts/bench/kernels_table.py generates from the committed JSON, and that JSON is the newest kernels run."""
from __future__ import annotations

import doctest
import json

import pytest

from peagle_lab.bench.archive import latest
from peagle_lab.testing import script_module

table = script_module("bench/kernels_table.py")
PAGE = table.ROOT / "docs" / "kernels.md"


def test_the_page_carries_the_blocks_of_the_committed_json():
    """Stale? Run `python scripts/bench/kernels_table.py --page docs/kernels.md` and commit docs/kernels.md."""
    page = PAGE.read_text()
    assert table.update_page(page, table.blocks()) == page, (
        f"docs/kernels.md's generated timings differ from the JSON: run {table.COMMAND} and commit docs/kernels.md")


@pytest.mark.parametrize("name", table.BLOCKS)
def test_each_block_appears_once_and_names_its_json(name):
    page = PAGE.read_text()
    begin, end = table.markers(name)
    assert page.count(begin) == 1 and page.count(end) == 1, name
    body = page.split(begin, 1)[1].split(end, 1)[0]
    source = {"kernels-prep": table.KERNELS_JSON, "kernels-attention": table.ATTENTION_JSON}[name]
    assert f"`{source}`" in body and (table.ROOT / source).is_file()


def test_the_page_quotes_the_newest_kernels_run():
    newest = latest("h200", "kernels") / "kernels.json"
    assert newest == table.ROOT / table.KERNELS_JSON, (
        f"a newer kernels run exists ({newest}); point KERNELS_JSON at it and run {table.COMMAND}")


def test_a_changed_measurement_makes_the_page_stale():
    d = json.loads((table.ROOT / table.KERNELS_JSON).read_text())
    d["rows"][0]["fused_graph_us"] *= 2
    changed = {**table.blocks(), "kernels-prep": table.prep_block(d, table.KERNELS_JSON)}
    page = PAGE.read_text()
    assert table.update_page(page, changed) != page
    assert f"{d['rows'][0]['fused_graph_us']:.2f} / " in table.update_page(page, changed)


def test_the_figures_in_the_blocks_are_the_json_s():
    d = json.loads((table.ROOT / table.KERNELS_JSON).read_text())
    prep = table.blocks()["kernels-prep"]
    graph = [r["fused_graph_us"] for r in d["rows"]]
    assert f"takes {min(graph):.1f}–{max(graph):.1f} µs" in prep
    for r in d["verify"]:
        assert f"| {r['c']} | {r['K']} | {r['dtype']} [" in prep


def test_a_page_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="kernels-prep"):
        table.update_page("# Fused kernels\n", table.blocks())


def test_the_generator_s_doctests_pass():
    result = doctest.testmod(table)
    assert result.attempted > 0 and result.failed == 0, result

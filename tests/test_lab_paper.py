"""The paper-vs-lab table (peagle_lab.lab.paper): its sources, our side, and the copy in docs/paper.md."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from peagle_lab.bench.archive import latest
from peagle_lab.lab import paper

ROOT = Path(__file__).resolve().parents[1]
SWEEP = latest("h200", "k_scaling") / "bench.json"


@pytest.fixture(scope="module")
def sweep():
    return json.loads(SWEEP.read_text())


def test_docs_paper_page_carries_the_table_of_the_committed_sweep(sweep):
    """Stale? Run `python -m peagle_lab.lab.paper docs/paper.md` and commit docs/paper.md."""
    page = (ROOT / "docs/paper.md").read_text()
    assert paper.update_page(page, sweep) == page


def test_every_published_figure_names_its_source():
    assert len({p.metric for p in paper.PUBLISHED}) == len(paper.PUBLISHED)
    for p in paper.PUBLISHED:
        assert p.source in paper.SOURCES and p.where and p.value, p
        assert p.metric in paper.METRIC_NAMES
    assert all(s.url.startswith("https://") for s in paper.SOURCES.values())


def _best_tps(sweep, method, workload, c):
    rows = [r for r in sweep["rows"] if r["method"] == method and r["workload"] == workload
            and r["concurrency"] == c and r["temperature"] == 0 and r["k"] in (3, 5, 7)]
    return max(r["tps"] for r in rows)


def test_our_side_is_read_from_the_sweep(sweep):
    rows = {r.metric: r.ours for r in paper.comparison(sweep)}
    chat = _best_tps(sweep, "peagle", "chat", 1) / _best_tps(sweep, "eagle3", "chat", 1)
    code = _best_tps(sweep, "peagle", "code", 1) / _best_tps(sweep, "eagle3", "code", 1)
    assert rows["speedup_c1"] == f"{chat:.2f}× / {code:.2f}×"
    al = {(r["method"], r["workload"]): r["acceptance_length"] for r in sweep["rows"]
          if r["k"] == 7 and r["concurrency"] == 1 and r["temperature"] == 0}
    assert rows["al_peagle_k7"] == f"{al['peagle', 'chat']:.2f} / {al['peagle', 'code']:.2f}"
    assert set(rows) == {p.metric for p in paper.PUBLISHED}


def test_the_markdown_names_our_device_model_and_heads(sweep):
    text = paper.markdown(sweep)
    assert sweep["run_info"]["device"] in text and "SmolLM2" in text
    assert "eagle3 1-layer" in text and "peagle 4-layer" in text
    assert text.count("\n| ") == len(paper.PUBLISHED) + 2  # header, separator, one row per figure


def test_update_page_needs_its_markers(sweep, tmp_path):
    with pytest.raises(ValueError, match="BEGIN"):
        paper.update_page("# no table here\n", sweep)
    page = tmp_path / "paper.md"
    page.write_text(f"# t\n\n{paper.BEGIN}\nold\n{paper.END}\nafter\n")
    assert paper.main([str(page), str(SWEEP)]) == 0
    text = page.read_text()
    assert "old" not in text and text.endswith("after\n") and "1.55× / 1.55× / 1.69×" in text


def test_our_setting_names_the_shipped_head_by_its_digest_not_a_copys_path(sweep):
    from peagle_lab.heads import bundled_head_dir
    from peagle_lab.heads.io import head_digest

    cfg = {**sweep["config"], "heads": {"eagle3": "/tmp/x/eagle3", "peagle": "/tmp/x/peagle"}}
    cfg["head_digests"] = {"eagle3": head_digest(bundled_head_dir("eagle3")), "peagle": "0" * 16}
    line = paper.our_setting({**sweep, "config": cfg})
    assert "(the shipped heads/eagle3)" in line and "peagle 4-layer (not the shipped head)" in line
    assert "/tmp/x" not in line
    del cfg["head_digests"]  # a run before fingerprints: its /tmp copy is named as such, not by its path
    line = paper.our_setting({**sweep, "config": cfg})
    assert "(a copy on the machine that ran it, not fingerprinted)" in line and "/tmp/x" not in line

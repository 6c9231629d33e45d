"""The paper-vs-lab table (peagle_lab.lab.paper): its sources, our side, and the copy in docs/paper.md.

The page reads the README's sweeps (``paper.lab_sweeps()``: answers to EOS, c = 64 batched continuously); a
fixed-length K sweep, named on the command line, still renders, labelled as the throughput-stress variant.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from peagle_lab.bench.archive import latest
from peagle_lab.lab import paper

ROOT = Path(__file__).resolve().parents[1]
SWEEP = latest("h200", "k_scaling") / "bench.json"  # a fixed-length K sweep


@pytest.fixture(scope="module")
def sweep():
    return json.loads(SWEEP.read_text())


@pytest.fixture(scope="module")
def answers():
    """(the c = 1 answer-length sweep, its path, (the continuous c = 64 sweep, its path)) the page reads."""
    bench, source, continuous = paper.lab_sweeps()
    assert continuous is not None, "the page expects a committed continuous-batching answer-length sweep"
    return bench, source, continuous


def test_docs_paper_page_carries_the_table_of_the_committed_sweeps(answers):
    """Stale? Run `python -m peagle_lab.lab.paper docs/paper.md` and commit docs/paper.md."""
    page = (ROOT / "docs/paper.md").read_text()
    assert paper.update_page(page, *answers) == page


def test_the_page_and_the_readme_read_the_same_sweeps(answers):
    bench, source, (doc, path) = answers
    assert source == paper.README_SWEEP and path == paper.continuous_sweep()[1]
    assert bench == paper.load_sweep(ROOT / paper.README_SWEEP)
    assert bench["config"]["ignore_eos"] is False and doc["config"]["continuous"] > 0


def test_every_published_figure_names_its_source():
    assert len({p.metric for p in paper.PUBLISHED}) == len(paper.PUBLISHED)
    for p in paper.PUBLISHED:
        assert p.source in paper.SOURCES and p.where and p.value, p
        assert p.metric in paper.METRIC_NAMES
    assert all(s.url.startswith("https://") for s in paper.SOURCES.values())


def _best(doc, method, workload, c):
    rows = [r for r in doc["rows"] if r["method"] == method and r["workload"] == workload
            and r["concurrency"] == c and r["temperature"] == 0 and r["k"] in (3, 5, 7)]
    return max(rows, key=lambda r: r["tps"])


def _ratio(doc, workload, c):
    return _best(doc, "peagle", workload, c)["tps"] / _best(doc, "eagle3", workload, c)["tps"]


def test_our_side_reads_c1_from_the_answer_sweep_and_c64_from_the_continuous_one(answers):
    bench, _, (doc, _) = answers
    rows = {r.metric: r.ours for r in paper.comparison(bench, doc)}
    assert set(rows) == {p.metric for p in paper.PUBLISHED}
    assert rows["speedup_c1"] == f"{_ratio(bench, 'mt_bench', 1):.2f}× / {_ratio(bench, 'code', 1):.2f}×"
    assert rows["speedup_c64"] == f"{_ratio(doc, 'mt_bench', 64):.2f}× / {_ratio(doc, 'code', 64):.2f}×"
    assert rows["speedup_c64"] != {r.metric: r.ours for r in paper.comparison(bench)}["speedup_c64"]  # not static
    al = {(r["method"], r["workload"], r["k"]): r["acceptance_length"] for r in bench["rows"]
          if r["concurrency"] == 1 and r["temperature"] == 0}
    assert rows["al_peagle_k7"] == f"{al['peagle', 'mt_bench', 7]:.2f} / {al['peagle', 'code', 7]:.2f}"
    gain = al["eagle3", "code", 7] - al["eagle3", "code", 3]
    assert rows["al_gain"].endswith(f"/ {gain:+.2f}")
    plain = [r["tps"] for r in bench["rows"] if r["method"] == "baseline" and r["workload"] == "code"
             and r["concurrency"] == 1]
    best = _best(bench, "peagle", "code", 1)
    assert rows["speedup_plain_c1"].endswith(f"/ {best['tps'] / plain[0]:.2f}× (K={best['k']})")
    ratios = [_ratio(d, w, c) for d, c in ((bench, 1), (doc, 64)) for w in ("mt_bench", "code")]
    assert rows["speedup_range"] == f"{min(ratios):.2f}×–{max(ratios):.2f}× (MT-Bench, HumanEval; c = 1, 64)"
    ks = " / ".join(str(_best(d, "eagle3", w, c)["k"]) for w in ("mt_bench", "code") for d, c in ((bench, 1), (doc, 64)))
    assert f"EAGLE-3 {ks} (MT-Bench c=1, 64 / HumanEval c=1, 64)" in rows["peak_k"]


def test_the_page_names_the_protocol_the_sweeps_and_the_shipped_heads(answers):
    bench, source, (doc, path) = answers
    text = paper.markdown(bench, source, (doc, path))
    first = text.splitlines()[0]
    assert bench["run_info"]["device"] in first and "SmolLM2" in first
    assert "eagle3 1-layer (the shipped heads/eagle3)" in first and "peagle 4-layer (the shipped heads/peagle)" in first
    assert "end-of-sequence token, the paper's protocol" in first and f"`{source}`" in first
    assert "c = 64 from a sweep that batches continuously" in first and f"`{path}`" in first
    assert "best K among {3, 5, 7}" in first and "fixed-length" not in first
    assert "| ours (MT-Bench / HumanEval) |" in text
    assert text.count("\n| ") == len(paper.PUBLISHED) + 2  # header, separator, one row per figure


def test_the_paper_column_puts_mt_bench_and_humaneval_first_as_ours_are(answers):
    text = paper.markdown(*answers)
    for metric in ("al_peagle_k3", "al_peagle_k7", "al_eagle3_k3", "al_eagle3_k7", "speedup_c1", "speedup_c64"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {paper.METRIC_NAMES[metric]} |"))
        setting, value = row.split(" | ")[1:3]
        assert setting.endswith("; MT-Bench / HumanEval / SPEED-Bench") and value.startswith(paper.paper_values(metric))
    assert "| 3.70 / 3.94 / 3.38 |" in text  # P-EAGLE at K = 7: MT-Bench, HumanEval, SPEED-Bench


def test_a_fixed_length_sweep_is_labelled_as_the_stress_variant(sweep):
    first = paper.our_setting(sweep, "k.json")
    assert "a fixed-length sweep (`k.json`), the throughput-stress variant, not the paper's protocol" in first
    assert f"decodes {sweep['config']['max_new_tokens']} new tokens, past its end-of-sequence token" in first
    assert "| ours (chat / HumanEval) |" in paper.markdown(sweep)


def test_the_continuous_sweep_must_be_one_of_the_same_heads(answers, sweep):
    bench, source, (doc, path) = answers
    with pytest.raises(ValueError, match="not an answer-length sweep"):
        paper.markdown(bench, source, (sweep, "k.json"))
    with pytest.raises(ValueError, match="expected a sweep batching continuously"):
        paper.markdown(bench, source, (bench, source))
    other = {**doc, "config": {**doc["config"], "head_digests": {"eagle3": "0" * 16, "peagle": "1" * 16}}}
    with pytest.raises(ValueError, match="different heads"):
        paper.markdown(bench, source, (other, path))


def test_update_page_needs_its_markers(sweep, tmp_path):
    with pytest.raises(ValueError, match="BEGIN"):
        paper.update_page("# no table here\n", sweep)
    page = tmp_path / "paper.md"
    page.write_text(f"# t\n\n{paper.BEGIN}\nold\n{paper.END}\nafter\n")
    assert paper.main([str(page), str(SWEEP)]) == 0
    text = page.read_text()
    assert "old" not in text and text.endswith("after\n") and "1.55× / 1.55× / 1.69×" in text
    assert "fixed-length sweep" in text


def test_main_without_a_sweep_reads_the_readme_sweeps_of_the_page_s_repository(tmp_path, answers):
    _, source, (_, path) = answers
    (tmp_path / source).parent.mkdir(parents=True)
    shutil.copy2(ROOT / source, tmp_path / source)
    page = tmp_path / "docs" / "paper.md"
    page.write_text(f"# t\n\n{paper.BEGIN}\nold\n{paper.END}\n")
    assert paper.main([str(page)]) == 0
    assert page.read_text() == paper.update_page(page.read_text(), *answers)
    assert f"`{source}`" in page.read_text() and f"`{path}`" in page.read_text()
    assert paper.main([str(page), str(SWEEP), "extra"]) == 2


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

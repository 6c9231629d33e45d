"""Benchmark figures: pure functions of a result, with the traces the report relies on."""
from __future__ import annotations

import pytest

from peagle_lab.bench import plots as viz
from peagle_lab.bench.report import render_html, write_report
from peagle_lab.bench.schema import BenchResult, BenchRow

RUN_INFO = {"device": "test", "torch": "x", "command": "x", "commit": None, "date": "x"}


def row(method, k, c, tps, workload, al_rates=(), source="peagle_lab"):
    drafts = 100 if k else 0
    acc = [round(r * drafts) for r in al_rates]
    return BenchRow(method, k, c, workload, 0.0, tps, 4.0, 1 + sum(acc) / drafts if drafts else 1.0,
                    [a / drafts for a in acc], drafts, sum(acc), 3.0, 0.5 if k else 0.0, 0.4 * (k > 0), 512,
                    source=source, step_ms=4.5 if k else 3.2)


@pytest.fixture(scope="module")
def result():
    rows = []
    for w in ("chat", "code"):
        for c in (1, 8):
            rows.append(row("baseline", 0, c, 100.0 * c, w))
            for k, rates in ((3, (0.8, 0.6, 0.4)), (5, (0.8, 0.6, 0.4, 0.2, 0.1))):
                rows.append(row("eagle3", k, c, 150.0 * c + k, w, rates))
                rows.append(row("peagle", k, c, 200.0 * c - k, w, rates))
    rows.append(row("baseline", 0, 1, 90.0, "chat", source="transformers"))
    return BenchResult(RUN_INFO, {"heads": {"eagle3": "random (untrained)"}}, rows)


def test_tps_vs_concurrency_draws_each_method_at_its_best_k(result):
    fig = viz.bench_tps_vs_concurrency(result, "chat")
    traces = {t.name: t for t in fig.data}
    assert list(traces) == ["plain decoding", "EAGLE-3", "P-EAGLE", "transformers static cache"]
    assert list(traces["EAGLE-3"].y) == [155.0, 1205.0] and list(traces["EAGLE-3"].text) == ["K=5", "K=5"]
    assert list(traces["P-EAGLE"].text) == ["K=3", "K=3"]
    assert fig.layout.xaxis.type == "log"


def test_speedup_has_one_line_per_workload(result):
    fig = viz.bench_speedup(result)
    assert [t.name for t in fig.data] == ["chat", "code"]
    assert list(fig.data[0].y) == pytest.approx([197 / 155, 1597 / 1205])


def test_acceptance_figures_pool_over_concurrency(result):
    al = viz.bench_acceptance_length_vs_k(result)
    assert len(al.data) == 4  # 2 methods × 2 workloads
    assert list(al.data[0].x) == [3, 5] and list(al.data[0].y) == pytest.approx([2.8, 3.1])
    pos = viz.bench_per_position_acceptance(result)
    assert "K=5" in pos.layout.title.text and list(pos.data[0].y) == pytest.approx([0.8, 0.6, 0.4, 0.2, 0.1])


def test_step_split_stacks_verify_draft_prep_other(result):
    fig = viz.bench_step_time_split(result, "code")
    assert [t.name for t in fig.data] == ["verify", "draft", "prep", "other"] and fig.layout.barmode == "stack"
    totals = [sum(t.y[i] for t in fig.data) for i in range(len(fig.data[0].y))]
    assert totals == pytest.approx([3.2, 4.5, 4.5] * 2)  # one bar per (c, method) at its best K


def test_figures_reject_a_temperature_that_was_not_measured(result):
    with pytest.raises(ValueError, match="temperature"):
        viz.bench_speedup(result, temperature=1.0)


def test_report_is_self_contained_html(result, tmp_path):
    path = write_report(result, tmp_path / "report.html")
    assert (tmp_path / "plotly.min.js").is_file()
    text = path.read_text()
    assert "random (untrained)" in text and "P-EAGLE/EAGLE-3 TPS, c=1, chat" in text
    assert "cdn.plot.ly" not in render_html(result, None)[:200]  # inlined, offline

"""The K model (peagle_lab.lab.kmodel) against the committed K sweep, and its sliders.

The sweep is read from the newest ``docs/results/h200/k_scaling/<date>-<commit>/bench.json`` whatever it holds: a newer
sweep of the same schema (new heads, other K) must pass the same checks.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from peagle_lab.bench.archive import latest
from peagle_lab.lab import kmodel
from peagle_lab.lab.kmodel import Acceptance, MethodModel, StepCosts

SWEEP = latest("h200", "k_scaling") / "bench.json"

# The tolerance, stated: adjacent cells of one sweep differ by up to ~12 % in step time for the same
# target pass (EAGLE-3 on chat at c=1 verifies in 1.54 ms at K=3-4 and 1.39 ms at K=6-8), so a
# decode-throughput curve this flat near its top cannot locate its peak K more closely than that.
SHORTFALL = 0.15  # measured decode TPS at the predicted K is within 15 % of the measured peak
PEAK_TPS = 0.10  # the predicted peak TPS is within 10 % of the measured peak TPS


@pytest.fixture(scope="module")
def sweep():
    return json.loads(SWEEP.read_text())


def _cells(bench):
    have = {(r["workload"], r["concurrency"]) for r in bench["rows"] if r["method"] in kmodel.METHODS}
    return sorted(have)


@pytest.mark.parametrize("workload", ["chat", "code"])
def test_the_predicted_peak_k_matches_the_measured_one_at_c1(sweep, workload):
    checks = kmodel.peak_check(kmodel.fit_k_model(sweep, workload, 1))
    assert set(checks) == {"eagle3", "peagle"}
    for method, c in checks.items():
        assert c["shortfall"] <= SHORTFALL, (method, c)
        assert abs(c["predicted_peak_tps"] / c["measured_peak_tps"] - 1) <= PEAK_TPS, (method, c)


def test_every_swept_cell_is_within_the_tolerance(sweep):
    cells = [(w, c) for w, c in _cells(sweep) if w in ("chat", "code")]
    assert cells, "the K sweep has no EAGLE-3 or P-EAGLE rows"
    for workload, c in cells:
        for method, check in kmodel.peak_check(kmodel.fit_k_model(sweep, workload, c)).items():
            assert check["shortfall"] <= SHORTFALL, (workload, c, method, check)


def test_the_fit_reads_the_sweep(sweep):
    fit = kmodel.fit_k_model(sweep, "chat", 1)
    rows = fit.rows["eagle3"]
    assert [r["k"] for r in rows] == sorted(r["k"] for r in rows) and fit.ks == sorted(fit.ks)
    a = max(rows, key=lambda r: r["k"])["per_position_acceptance"]
    assert fit.models["eagle3"].acceptance.first == pytest.approx(a[0])
    # EAGLE-3 pays a pass per draft token, P-EAGLE one pass: the fitted per-pass costs say so
    e3, pe = fit.models["eagle3"].costs, fit.models["peagle"].costs
    assert e3.verify_ms == pe.verify_ms  # one target, one verify line
    for m, model in fit.models.items():
        top = max(fit.rows[m], key=lambda r: r["k"])
        assert kmodel.drafter_passes(m, top["k"]) * model.costs.pass_ms == pytest.approx(top["draft_ms"], rel=0.3)


def test_the_model_says_why_eagle3_peaks_and_peagle_does_not():
    """Same acceptance, same costs: only the pass per draft token differs."""
    acc, costs = Acceptance(0.6, 0.6), StepCosts(verify_ms=1.4, verify_ms_per_token=0.0, pass_ms=0.1, host_ms=0.2)
    e3, pe = MethodModel("eagle3", acc, costs), MethodModel("peagle", acc, costs)
    ks = range(1, 13)
    assert kmodel.predicted_peak_k(e3, 1, ks) < kmodel.predicted_peak_k(pe, 1, ks) == 12
    # a verify pass that grows with its tokens (large c) pulls P-EAGLE's peak in too
    busy = MethodModel("peagle", acc, StepCosts(2.0, 0.2, 0.1, 0.2))
    assert kmodel.predicted_peak_k(busy, 64, ks) < 12
    # better acceptance deeper in the chain moves EAGLE-3's peak out
    assert kmodel.predicted_peak_k(MethodModel("eagle3", Acceptance(0.8, 0.9), costs), 1, ks) > \
        kmodel.predicted_peak_k(e3, 1, ks)


@pytest.mark.parametrize("bad", [dict(first=1.2, decay=0.5), dict(first=0.5, decay=-0.1)])
def test_bad_acceptance(bad):
    with pytest.raises(ValueError):
        Acceptance(**bad)


def test_no_rows_for_that_cell(sweep):
    with pytest.raises(ValueError, match="no eagle3/peagle rows"):
        kmodel.fit_k_model(sweep, "chat", 3)
    with pytest.raises(ValueError):
        kmodel.drafter_passes("medusa", 3)


def test_the_figure_draws_model_and_measurement(sweep):
    pytest.importorskip("plotly")
    from peagle_lab.lab.mechanics_figures import k_model_figure

    fit = kmodel.fit_k_model(sweep, "code", 64)
    fig = k_model_figure(fit)
    assert len(fig.data) == 5 * len(fit.models)
    star = fig.data[2]
    assert star.x[0] == kmodel.predicted_peak_k(fit.models["eagle3"], 64, list(range(1, max(fit.ks) + 1)))


def test_the_sliders_move_the_curves(sweep):
    pytest.importorskip("ipywidgets")
    from peagle_lab.lab.widgets import KModelExplorer

    explorer = KModelExplorer(sweep, "chat", 1, max_k=12)
    assert list(explorer.figure.data[1].x) == list(range(1, 13))  # the model runs past the sweep's K
    first = explorer.redraws
    before = list(explorer.figure.data[6].y)  # P-EAGLE's predicted TPS
    explorer.sliders["peagle", "decay"].value = 0.9
    assert explorer.redraws == first + 1
    after = list(explorer.figure.data[6].y)
    assert after[-1] > before[-1] and after[0] == pytest.approx(before[0])  # K=1 has no deeper positions
    explorer.sliders["eagle3", "pass_ms"].value = 0.0  # free drafter passes: EAGLE-3 peaks late
    assert explorer.predicted_peaks()["eagle3"] >= 6
    explorer.concurrency.value = 64  # refits: the sliders return to the fitted values
    assert explorer.sliders["peagle", "decay"].value == pytest.approx(explorer.base.models["peagle"].acceptance.decay)


def test_sweep_heads_names_the_shipped_heads_by_digest():
    from peagle_lab.heads import bundled_head_dir
    from peagle_lab.heads.io import head_digest

    shipped = {m: head_digest(bundled_head_dir(m)) for m in kmodel.METHODS}
    assert kmodel.sweep_heads({"config": {"head_digests": shipped}}) == {m: "the shipped head" for m in kmodel.METHODS}
    other = kmodel.sweep_heads({"config": {"head_digests": {"eagle3": "0123456789abcdef"}}})
    assert other == {"eagle3": "another head (digest 0123456789abcdef)", "peagle": "no fingerprint recorded"}
    paths = kmodel.sweep_heads({"config": {"heads": {"peagle": "/tmp/ship/peagle-4l"}}})
    assert paths == {"eagle3": "no fingerprint recorded", "peagle": "no fingerprint recorded; loaded from /tmp/ship/peagle-4l"}

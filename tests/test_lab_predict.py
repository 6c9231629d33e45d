"""Predict and check (peagle_lab.lab.predict) on committed data: the K sweep and the scale lab's JSON."""
from __future__ import annotations

import json
import math

import pytest

from peagle_lab.lab import predict, scale_runs
from peagle_lab.lab.kmodel import Acceptance, measured_decode_tps
from peagle_lab.lab.paper import HUMANEVAL_AL, SPEED_BENCH_SPEEDUP, k_sweep
from peagle_lab.provenance import REPO


@pytest.fixture(scope="module")
def bench():
    return json.loads((REPO / k_sweep()).read_text())  # the fixed-length K sweep (archive.latest)


@pytest.fixture(scope="module")
def scale_doc():
    """The CPU rehearsal: every shape of its grid, whatever GPU run is committed beside it."""
    return predict.load_scale(REPO / predict.CPU_SCALE)[0]


def test_the_committed_default_scale_json_predicts_its_shapes(bench):
    doc, path = predict.load_scale()
    shapes = predict.shapes_of(doc)
    assert shapes, path
    for shape in shapes:
        for r in predict.speedup_table(doc, shape, predict.paper_acceptance()):
            assert r["ratio"] > 0 and r["paper"] == SPEED_BENCH_SPEEDUP.get(r["concurrency"])
    if "smollm2-135m" in shapes:
        assert predict.check_against_bench(doc, bench)


def _scale_from_bench(bench, workload):
    """A scale-lab document whose SmolLM2 costs are the sweep's own measured step parts (one workload)."""
    costs = [{"shape": "smollm2-135m", "method": r["method"], "depth": 1 if r["method"] == "eagle3" else 4,
              "k": r["k"], "concurrency": r["concurrency"], "verify_ms": r["verify_ms"], "prep_ms": r["prep_ms"],
              "draft_ms": r["draft_ms"], "host_ms": r["step_ms"] - r["verify_ms"] - r["prep_ms"] - r["draft_ms"],
              "step_ms": r["step_ms"]}
             for r in bench["rows"] if r["workload"] == workload and r["method"] != "baseline" and r["temperature"] == 0]
    return {"costs": costs}


def test_fit_geometric_reproduces_the_papers_two_als():
    for m in ("eagle3", "peagle"):
        acc = predict.paper_acceptance()[m]
        assert predict.al_at(acc, 3) == pytest.approx(HUMANEVAL_AL[(m, 3)], abs=1e-9)
        assert predict.al_at(acc, 7) == pytest.approx(HUMANEVAL_AL[(m, 7)], abs=1e-9)
    acc = predict.paper_acceptance()
    assert acc["peagle"].decay > acc["eagle3"].decay  # P-EAGLE keeps accepting at depth in the paper


@pytest.mark.parametrize("al3, al7", [(1.0, 2.0), (2.0, 1.9), (2.0, 3.5), (3.9, 4.5)])
def test_fit_geometric_rejects_als_no_geometric_acceptance_has(al3, al7):
    with pytest.raises(ValueError, match="AL"):
        predict.fit_geometric(al3, al7)


def test_measured_acceptance_pools_the_largest_k(bench):
    acc = predict.measured_acceptance(bench, "code")
    k = max(r["k"] for r in bench["rows"] if r["method"] == "peagle" and r["workload"] == "code")
    top = [r for r in bench["rows"] if r["method"] == "peagle" and r["workload"] == "code" and r["k"] == k]
    assert len(acc["peagle"]) == k
    lo = min(r["per_position_acceptance"][0] for r in top)
    hi = max(r["per_position_acceptance"][0] for r in top)
    assert lo <= acc["peagle"][0] <= hi
    with pytest.raises(ValueError, match="workloads"):
        predict.measured_acceptance(bench, "poetry")


def test_al_at_rejects_k_past_the_measured_positions():
    with pytest.raises(ValueError, match="K=4"):
        predict.al_at((0.7, 0.5, 0.3), 4)
    assert predict.al_at(Acceptance(1.0, 1.0), 5) == 6.0


@pytest.mark.parametrize("workload", ["chat", "code"])
def test_check_is_within_ten_percent_when_the_step_costs_are_the_sweeps_own(bench, workload):
    """With the measured steps (every row busy), only the acceptance model (per position from the largest K) can err."""
    rows = {"rows": [{k: v for k, v in r.items() if k != "row_steps"} for r in bench["rows"] if r["workload"] == workload]}
    cells = predict.check_against_bench(_scale_from_bench(bench, workload), rows)
    summary = predict.check_summary(cells)
    assert summary["cells"] == sum(r["method"] != "baseline" and r["temperature"] == 0 for r in rows["rows"])
    assert summary["all_within"], summary
    for c in cells:
        assert c["error"] == pytest.approx(c["predicted_tps"] / c["measured_tps"] - 1)
        assert c["predicted_step_ms"] == pytest.approx(c["measured_step_ms"])


def test_check_against_the_committed_scale_json(bench, scale_doc):
    cells = predict.check_against_bench(scale_doc, bench)
    cs = {r["concurrency"] for r in scale_doc["costs"] if r["shape"] == "smollm2-135m"}
    assert cells and {c["concurrency"] for c in cells} == cs & {r["concurrency"] for r in bench["rows"]}
    one = cells[0]
    row = next(r for r in bench["rows"] if r["workload"] == one["workload"] and r["method"] == one["method"]
               and r["k"] == one["k"] and r["concurrency"] == one["concurrency"])
    assert one["measured_tps"] == pytest.approx(measured_decode_tps(row))
    assert math.isfinite(predict.check_summary(cells)["max_abs_error"])


def test_speedup_table_sits_beside_the_papers(scale_doc):
    table = predict.speedup_table(scale_doc, "gpt-oss-20b", predict.paper_acceptance())
    assert table and [r["concurrency"] for r in table] == sorted(r["concurrency"] for r in table)
    for r in table:
        assert r["ratio"] == pytest.approx(r["peagle_tps"] / r["eagle3_tps"])
        assert r["paper"] == SPEED_BENCH_SPEEDUP[r["concurrency"]]
        assert 1 <= r["peagle_k"] <= 8 and 1 <= r["eagle3_k"] <= 8
    with pytest.raises(ValueError, match="depth 3"):
        predict.speedup_table(scale_doc, "gpt-oss-20b", predict.paper_acceptance(), depth=3)


def _cell_al(doc, method, workload, k, c=1):
    return next(r["acceptance_length"] for r in doc["rows"] if (r["method"], r["workload"], r["k"], r["concurrency"],
                                                               r["temperature"]) == (method, workload, k, c, 0))


def test_baseline_strength_reads_the_measured_k3_and_k7_cells(bench):
    s = predict.baseline_strength(bench, "code")
    for m in ("eagle3", "peagle"):
        al3, al7 = _cell_al(bench, m, "code", 3), _cell_al(bench, m, "code", 7)
        assert (s[f"ours_{m}"]["al3"], s[f"ours_{m}"]["al7"]) == (al3, al7)
        assert s[f"ours_{m}"]["gain"] == pytest.approx(al7 - al3)
    assert s["paper_eagle3"]["gain"] == pytest.approx(3.03 - 2.65)
    no_k7 = {"rows": [r for r in bench["rows"] if r["k"] != 7]}
    assert "ours_eagle3" not in predict.baseline_strength(no_k7, "code")


def test_notebook_8_and_the_paper_page_print_the_same_gains_and_ratios():
    """Notebook 8's section 5 (scale_report.baseline_text) and docs/paper.md's AL-gain and AL rows
    (paper_data.comparison) read the same cells of the answer-length sweep, so they print the same figures."""
    from peagle_lab.lab import paper_data, scale_report

    answers, _ = predict.answer_sweep()
    rows = {r.metric: r.ours for r in paper_data.comparison(answers)}
    text = scale_report.baseline_text(answers)
    chat, code = paper_data.lab_workloads(answers)
    for m, label in (("peagle", "P-EAGLE"), ("eagle3", "EAGLE-3")):
        gains = [predict.baseline_strength(answers, w)[f"ours_{m}"]["gain"] for w in (chat, code)]
        assert f"{label} {gains[0]:+.2f} / {gains[1]:+.2f}" in rows["al_gain"]
        for w, g in zip((chat, code), gains):
            assert f"ours, {w}".ljust(17) + f" {label:<8}" in text and f"gain {g:+.2f}" in text
    for w in (chat, code):  # the K = 7 AL ratio: the same cells notebook 5 reads at c = 1, K = 7
        ratio = _cell_al(answers, "peagle", w, 7) / _cell_al(answers, "eagle3", w, 7)
        assert f"ours on {w}: {ratio:.2f}x" in text


def test_load_scale_names_its_file(tmp_path):
    doc, path = predict.load_scale()
    files = path.split(" + ")  # several GPU runs merge: each named, the default runs' newest first
    grids = {p: json.loads(p.read_text())["grid"] for p in predict.scale_files()}  # ragged runs may be newer
    newest_default = next(p for p, g in grids.items() if not g.get("prompt_range") and g["prompt_tokens"] == 160)
    assert predict.REPO / files[0] == newest_default and doc["costs"]
    assert all((predict.REPO / f).is_file() for f in files)
    assert predict.scale_files()[-1] == predict.REPO / predict.CPU_SCALE
    with pytest.raises(ValueError, match="peagle-lab scale"):
        predict.load_scale(tmp_path / "none.json")


def test_curves_and_split_cover_the_acceptance(bench, scale_doc):
    ours = predict.measured_acceptance(bench, "code")
    curves = predict.tps_curves(scale_doc, "gpt-oss-20b", 1, ours)
    assert list(curves["peagle"]) == list(range(1, len(ours["peagle"]) + 1))
    split = predict.step_split(scale_doc, "gpt-oss-20b", 1, {"eagle3": 3, "peagle": 7})
    whole = predict.step_costs(scale_doc, "gpt-oss-20b", "peagle", 7, 1, predict.PEAGLE_DEPTH)
    assert sum(split["peagle"].values()) == pytest.approx(whole["step_ms"])
    assert predict.shapes_of(scale_doc)[0] == "smollm2-135m"
    if not isinstance(scale_doc["moe"].get("gpt-oss-20b"), str):  # a device without grouped GEMMs records why
        assert "gpt-oss-20b+moe" in predict.shapes_of(scale_doc)


def test_figures_draw_what_predict_computes(scale_doc):
    pytest.importorskip("plotly")
    from peagle_lab.lab import scale_figures

    acc = predict.paper_acceptance()
    curves = predict.tps_curves(scale_doc, "gpt-oss-20b", 1, acc)
    fig = scale_figures.prediction_figure(curves, predict.step_split(scale_doc, "gpt-oss-20b", 1, 7), title="t")
    assert list(fig.data[0].y) == list(curves["eagle3"].values())
    splits = {s: predict.step_split(scale_doc, s, 1, 7) for s in ("smollm2-135m", "gpt-oss-20b")}
    fig = scale_figures.scale_step_figure(splits, k=7, concurrency=1, depth=4, device="cpu")
    assert len(fig.data) == len(scale_figures.PARTS) and len(fig.data[0].y) == 4
    table = predict.speedup_table(scale_doc, "gpt-oss-20b", acc)
    fig = scale_figures.speedup_figure({"paper": table}, shape="gpt-oss-20b", paper=SPEED_BENCH_SPEEDUP)
    assert list(fig.data[0].y) == [r["ratio"] for r in table]
    assert fig.data[-1].name == "the paper, measured on SPEED-Bench (B200)"


def test_scale_explorer_switches_sources_and_shapes(bench, scale_doc):
    pytest.importorskip("ipywidgets")
    from peagle_lab.lab.widgets import ScaleExplorer

    e = ScaleExplorer(scale_doc, bench)
    assert e.redraws == 1 and "paper" in e.figure.layout.title.text
    e.source.value = "ours: code"
    assert len(e.curves["eagle3"]) == len(predict.measured_acceptance(bench, "code")["eagle3"])
    e.sliders["peagle", "decay"].value = 0.9  # moving a slider picks the sliders
    assert e.source.value == "sliders" and e.acceptance()["peagle"].decay == 0.9
    e.shape.value = "smollm2-135m"
    assert e.concurrency.value in predict.concurrencies_of(scale_doc, "smollm2-135m")
    assert e.figure.layout.title.text.startswith("smollm2-135m")


def test_paper_acceptance_per_benchmark():
    from peagle_lab.lab.paper import PAPER_AL

    for bench_name, al in PAPER_AL.items():
        acc = predict.paper_acceptance(bench_name)
        for (m, k), value in al.items():
            assert predict.al_at(acc[m], k) == pytest.approx(value, abs=1e-9)
    with pytest.raises(ValueError, match="SPEED-Bench"):
        predict.paper_acceptance("GSM8K")


def test_drafting_cost_to_match_reproduces_the_ratio_it_was_asked_for(scale_doc):
    acc = predict.paper_acceptance("SPEED-Bench")
    now = predict.speedup_table(scale_doc, "gpt-oss-20b", acc)[0]["ratio"]
    assert predict.drafting_cost_to_match(scale_doc, "gpt-oss-20b", 1, acc, now) == pytest.approx(1.0, abs=1e-3)
    higher = predict.drafting_cost_to_match(scale_doc, "gpt-oss-20b", 1, acc, now * 1.2)
    assert higher is not None and higher > 1.0
    assert predict.drafting_cost_to_match(scale_doc, "gpt-oss-20b", 1, acc, 100.0) is None


def test_scale_report_prints_what_predict_computes(bench, scale_doc):
    from peagle_lab.lab import scale_report

    cells = predict.check_against_bench(scale_doc, bench)
    text = scale_report.check_table(cells)
    s = predict.check_summary(cells)
    assert f"largest error {s['max_abs_error']:.1%}" in text
    acc = predict.paper_acceptance("SPEED-Bench")
    ratio = predict.speedup_table(scale_doc, "gpt-oss-20b", acc)[0]["ratio"]
    assert f"predicted P/E {ratio:.2f}x" in scale_report.distance_report(scale_doc)
    assert "no GPU preset" in scale_report.distance_report(scale_doc)  # the CPU rehearsal: no device to carry to
    speedups = scale_report.speedup_text({"paper": predict.speedup_table(scale_doc, "gpt-oss-20b", acc)}).splitlines()
    assert "paper, SPEED-Bench (measured)" in speedups[1]  # the column names its benchmark: not MT-Bench/HumanEval
    assert speedups[2].split()[:2] == ["1", f"{SPEED_BENCH_SPEEDUP[1]:.2f}x"]
    lead = 3.94 / 3.03
    assert f"the paper {lead:.2f}x" in scale_report.baseline_text(bench)
    table = scale_report.acceptance_vs_shape(scale_doc, {"paper": acc})
    assert all(shape in table for shape in predict.shapes_of(scale_doc))
    assert "smollm2-135m" in scale_report.step_table(scale_doc, 7, 1)
    assert scale_report.scale_summary(scale_doc, "x.json").startswith("scale lab: x.json")


def _run(device, date, shapes):
    return {"device": device, "date": date, "grid": {"shapes": list(shapes)}, "shapes": {s: {} for s in shapes},
            "rows": [{"shape": s, "run": date} for s in shapes if "+" not in s], "skipped": [],
            "costs": [{"shape": s, "method": m, "k": 1} for s in shapes for m in ("eagle3", "peagle")]}


def test_committed_gpu_runs_replace_the_cpu_rehearsal_and_merge(tmp_path, monkeypatch):
    cpu = tmp_path / predict.CPU_SCALE
    cpu.parent.mkdir(parents=True)
    cpu.write_text(json.dumps(_run("CPU", "2026-12-06", ["gpt-oss-20b"])))
    monkeypatch.setattr(scale_runs, "REPO", tmp_path)
    assert predict.load_scale()[1] == predict.CPU_SCALE
    longer = _run("H100", "2026-12-06T04:50", ["gpt-oss-20b"])
    longer["grid"]["prompt_tokens"] = 320  # a uniform run at another context: it goes to "contexts"
    # run folders (archive.run_folders) and their sub-folders; neither folder names nor paths sort by date
    runs = (("h100/scale/2026-12-06-fbbbbbb", _run("H100", "2026-12-06T04:00", ["smollm2-135m", "gpt-oss-20b"])),
            ("h100/scale/2026-12-06-fbbbbbb/ctx320", longer),
            ("h100/scale/2026-12-06-0aaaaaa/moe", _run("H100", "2026-12-06T04:40", ["gpt-oss-20b", "gpt-oss-20b+moe"])),
            ("h200/scale/2026-12-05-ccccccc", _run("H200", "2026-12-05", ["llama-3.1-8b"])))
    for folder, doc in runs:
        (tmp_path / "docs/results" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs/results" / folder / "scale.json").write_text(json.dumps(doc))
    newest_first = [runs[i][0] for i in (1, 2, 0, 3)]
    assert predict.scale_files() == [tmp_path / "docs/results" / f / "scale.json" for f in newest_first] + [cpu]
    doc, path = predict.load_scale()
    assert path == ("docs/results/h100/scale/2026-12-06-0aaaaaa/moe/scale.json + "
                    "docs/results/h100/scale/2026-12-06-fbbbbbb/scale.json + "
                    "docs/results/h100/scale/2026-12-06-fbbbbbb/ctx320/scale.json")  # the defaults, then contexts
    assert [c["grid"]["prompt_tokens"] for c in doc["contexts"]] == [320]
    assert predict.shapes_of(doc) == ["smollm2-135m", "gpt-oss-20b", "gpt-oss-20b+moe"]  # the H200 run: another device
    assert [(r["shape"], r["run"]) for r in doc["rows"]] == [("gpt-oss-20b", "2026-12-06T04:40"),  # newest wins
                                                             ("smollm2-135m", "2026-12-06T04:00")]


def test_answer_sweep_is_the_newest_answer_length_run():
    doc, path = predict.answer_sweep()
    assert "answer_length" in path and doc["rows"]
    assert predict.code_workload(doc) in predict.workloads_of(doc)


def _costs(shape, cs, step=lambda c: float(c)):
    parts = ("verify_ms", "prep_ms", "draft_ms", "host_ms")
    return [{"shape": shape, "method": m, "depth": 1 if m == "eagle3" else 4, "k": k, "concurrency": c,
             **{p: step(c) / 4 for p in parts}, "step_ms": step(c)} for m in ("eagle3", "peagle") for k in (1, 2)
            for c in cs]


def _row(method, k, c, **extra):
    return {"method": method, "k": k, "concurrency": c, "workload": "code", "temperature": 0.0, "source": "peagle_lab",
            "per_position_acceptance": [0.5, 0.25], "num_drafts": 10, "acceptance_length": 1.5 if k == 1 else 1.75,
            "step_ms": 12.0, **extra}


def test_a_static_batch_is_predicted_at_the_rows_its_steps_kept_busy():
    scale = {"costs": _costs("smollm2-135m", (1, 8, 16, 64))}  # step_ms = c
    bench = {"rows": [_row(m, k, 64, num_steps=100, row_steps=1200) for m in ("eagle3", "peagle") for k in (1, 2)]
             + [_row(m, 2, 1) for m in ("eagle3", "peagle")]}
    cells = {(c["method"], c["k"], c["concurrency"]): c for c in predict.check_against_bench(scale, bench)}
    one = cells["peagle", 1, 64]
    assert one["rows"] == 12.0 and not one["continuous"]
    assert one["predicted_step_ms"] == pytest.approx(12.0)  # halfway between c = 8 and c = 16
    assert one["predicted_tps"] == pytest.approx(1000 * 12 * 1.5 / 12.0)
    assert one["measured_tps"] == pytest.approx(1000 * 12 * 1.5 / 12.0) and one["error"] == pytest.approx(0.0)
    assert one["full_rows_error"] == pytest.approx((64 * 1.5 / 64.0) / (64 * 1.5 / 12.0) - 1)  # all 64 rows busy
    assert cells["eagle3", 2, 1]["rows"] == 1.0  # no row_steps at c = 1: every row busy
    from peagle_lab.lab import scale_report

    text = scale_report.check_table(list(cells.values()))
    assert "4 cells at c = 64 kept 12.0-12.0 rows busy" in text and f"{one['full_rows_error']:+.1%}" in text


def test_continuous_rows_are_marked_and_kept_full():
    scale = {"costs": _costs("smollm2-135m", (1, 64))}
    bench = {"rows": [_row(m, 2, 64, num_steps=10, row_steps=640, continuous=True) for m in ("eagle3", "peagle")]}
    cells = predict.check_against_bench(scale, bench)
    assert all(c["continuous"] and c["rows"] == 64.0 and c["error"] == pytest.approx(c["full_rows_error"])
               for c in cells)


def _sweep(date, continuous, concurrencies=None):
    cs = concurrencies or ([64] if continuous else [64, 1])
    return {"run_info": {"date": date}, "config": {"continuous": continuous, "concurrencies": cs},
            "rows": [_row(m, 2, c) for m in ("eagle3", "peagle") for c in cs]}


def test_answer_sweep_tells_static_from_continuous_batching(tmp_path, monkeypatch):
    monkeypatch.setattr(predict, "REPO", tmp_path)
    static = "docs/results/h100/answer_length/2026-12-06-aaaaaaa/bench.json"
    for folder, doc in (("h100/answer_length/2026-12-06-aaaaaaa", _sweep("2026-12-06T03:45", 0)),
                        ("h200/answer_length/2026-12-01-bbbbbbb", _sweep("2026-12-01", 0))):  # older, listed last
        (tmp_path / "docs/results" / folder).mkdir(parents=True)
        (tmp_path / "docs/results" / folder / "bench.json").write_text(json.dumps(doc))
    assert predict.answer_sweep()[1] == static
    with pytest.raises(ValueError, match="no continuous-batching answer-length sweep at c = 64 among the 2"):
        predict.answer_sweep(continuous=True)
    served = tmp_path / "docs/results/h100/answer_length/2026-12-06-ccccccc"
    served.mkdir(parents=True)
    (served / "bench.json").write_text(json.dumps(_sweep("2026-12-06T07:30", 4)))
    assert predict.answer_sweep(continuous=True)[1] == "docs/results/h100/answer_length/2026-12-06-ccccccc/bench.json"
    assert predict.answer_sweep()[1] == static  # the newer one batches differently
    single = tmp_path / "docs/results/h100/answer_length/2026-12-06-ddddddd"  # the newest: its c = 1 column alone
    single.mkdir(parents=True)
    (single / "bench.json").write_text(json.dumps(_sweep("2026-12-06T21:58", 0, [1])))
    assert predict.answer_sweep()[1] == static  # the whole grid is c = 1 and 64
    assert predict.answer_sweep(concurrencies=(1,))[1] == "docs/results/h100/answer_length/2026-12-06-ddddddd/bench.json"
    assert predict.answer_sweep(concurrencies=(64,))[1] == static
    with pytest.raises(ValueError, match="no static-batch answer-length sweep at c = 8 among the 4"):
        predict.answer_sweep(concurrencies=(8,))


def test_occupancy_text_reads_the_sweeps_batches():
    from peagle_lab.lab import scale_report

    doc, _ = predict.answer_sweep()
    text = scale_report.occupancy_text(doc, predict.load_scale()[0])
    base = next(r for r in doc["rows"] if r["method"] == "baseline" and r["concurrency"] == 64 and r["workload"] == "code")
    assert f"{base['row_steps']:,} row-steps for {base['output_tokens']:,} tokens" in text
    assert ("static batches of 64" in text) == (not doc["config"]["continuous"])
    scale = predict.load_scale()[0]["grid"]
    mean = doc["config"]["prompts"]["code"]["mean_tokens"] + base["output_tokens"] / base["num_prompts"] / 2
    ratio = mean / (scale["prompt_tokens"] + scale["new_tokens"] / 2)
    assert f"a step's context about {mean:.0f} tokens, {ratio:.1f}x the scale lab's" in text


def test_distance_numbers_at_the_papers_shape():
    from peagle_lab.lab import scale_report

    doc, _ = predict.load_scale()
    if "gpt-oss-20b" not in predict.shapes_of(doc):
        pytest.skip("no GPU scale-lab run of GPT-OSS-20B is committed")
    n = scale_report.distance_numbers(doc)
    speed = predict.paper_acceptance("SPEED-Bench")
    assert n["paper"] == SPEED_BENCH_SPEEDUP[1] and n["device"] == "B200"
    assert n["dense"]["best"] == predict.speedup_table(doc, "gpt-oss-20b", speed)[0]
    assert n["routed"]["best"] == predict.speedup_table(doc, "gpt-oss-20b+moe", speed)[0]
    assert n["routed"]["verify"][8] > n["routed"]["verify"][1]  # K + 1 tokens read more experts
    assert n["routed"]["best"]["ratio"] < n["dense"]["best"]["ratio"]  # which taxes P-EAGLE's deep K
    factor = n["dense"]["drafting"]
    assert factor > 1 and predict.drafting_cost_to_match(doc, "gpt-oss-20b", 1, speed, 1.69) == factor
    text = scale_report.distance_report(doc)
    for v in ("dense", "routed"):
        assert f"predicted P/E {n[v]['best']['ratio']:.2f}x" in text and f"{n[v]['device_verify']:.2f}x" in text


def test_continuous_check_text_picks_up_a_continuous_sweep_once_committed(tmp_path, monkeypatch):
    from peagle_lab.lab import scale_report

    scale = {"costs": _costs("smollm2-135m", (1, 64)), "grid": {"prompt_tokens": 160, "new_tokens": 24}}
    monkeypatch.setattr(predict, "REPO", tmp_path)
    served = tmp_path / "docs/results/h100/answer_length/2026-12-06-aaaaaaa"  # a run folder (archive.run_folders)
    served.mkdir(parents=True)
    assert "no continuous-batching answer-length sweep" in scale_report.continuous_check_text(scale)
    doc = _sweep("2026-12-06T07:30", 4)
    doc["run_info"]["device"] = "NVIDIA H100 80GB HBM3"
    doc["rows"] = [_row(m, 2, 64, num_steps=10, row_steps=630, continuous=True) for m in ("eagle3", "peagle")]
    (served / "bench.json").write_text(json.dumps(doc))
    text = scale_report.continuous_check_text(scale)
    assert text.startswith("continuous batching: docs/results/h100/answer_length/2026-12-06-aaaaaaa/bench.json")
    assert "the scale lab's uniform runs: steps attending to 172 tokens" in text  # each cell's step read at its context
    assert "cells at c = 64 kept" not in text  # the rows stayed busy: nothing to say about emptied batches


def test_a_run_at_another_prompt_length_goes_to_contexts_and_replaces_no_costs():
    base, longer = (_run("H100", date, ["smollm2-135m"]) for date in ("2026-12-06T04:00", "2026-12-06T09:00"))
    base["grid"]["prompt_tokens"], longer["grid"]["prompt_tokens"] = 160, 640
    doc, path = predict.merge_scale([(longer, "b.json"), (base, "a.json")])  # newest first
    assert [r["run"] for r in doc["rows"]] == ["2026-12-06T04:00"] and doc["grid"]["prompt_tokens"] == 160
    assert [c["file"] for c in doc["contexts"]] == ["b.json"] and path == "a.json + b.json"
    assert predict.context_runs(doc) == [doc, doc["contexts"][0]]


def test_the_check_interpolates_the_step_to_each_cells_context():
    """Runs at 160- and 640-token prompts (steps attend to 172 and 652 tokens): c ms and 2c ms a step."""
    scale = {"grid": {"prompt_tokens": 160, "new_tokens": 24}, "costs": _costs("smollm2-135m", (1, 64))}
    scale["contexts"] = [{"grid": {"prompt_tokens": 640, "new_tokens": 24},
                          "costs": _costs("smollm2-135m", (1, 64), lambda c: 2.0 * c)}]
    rows = [_row(m, 2, 64, num_steps=10, row_steps=640, continuous=True, output_tokens=2240, num_prompts=10)
            for m in ("eagle3", "peagle")]
    bench = {"config": {"prompts": {"code": {"mean_tokens": 300.0}}}, "rows": rows}
    cell, _ = predict.check_against_bench(scale, bench)
    assert cell["context"] == pytest.approx(412.0)  # 300-token prompts, answers of 224: halfway from 172 to 652
    assert cell["predicted_step_ms"] == pytest.approx(1.5 * 64)
    far, _ = predict.check_against_bench(scale, {**bench, "config": {"prompts": {"code": {"mean_tokens": 5000.0}}}})
    assert far["predicted_step_ms"] == pytest.approx(2.0 * 64)  # past the longest run: that run stands in
    unknown, _ = predict.check_against_bench(scale, {"rows": rows})  # no prompt lengths recorded: the default run
    assert unknown["context"] is None and unknown["predicted_step_ms"] == pytest.approx(64.0)
    with pytest.raises(ValueError, match="no run has"):
        predict.step_costs_at_context([scale], "llama-3.1-8b", "eagle3", 1, 1, 300)


def _ragged(lo, hi, date, cs, step):
    """A ragged run (prompts drawn from [lo, hi]) of the SmolLM2 shape: ``step(c)`` ms a step at each c of ``cs``."""
    return {"device": "H100", "date": date, "grid": {"shapes": ["smollm2-135m"], "prompt_tokens": (lo + hi) // 2,
            "prompt_range": [lo, hi], "new_tokens": 24}, "shapes": {"smollm2-135m": {}}, "rows": [], "skipped": [],
            "costs": _costs("smollm2-135m", cs, step)}


def test_a_ragged_run_goes_to_ragged_and_replaces_no_costs():
    base = _run("H100", "2026-12-06T04:00", ["smollm2-135m"])
    base["grid"]["prompt_tokens"] = 160
    old, new, wide = (_ragged(40, 600, "2026-12-06T05:00", (64,), float), _ragged(40, 600, "2026-12-06T09:00", (64,), float),
                      _ragged(40, 1240, "2026-12-06T08:00", (64,), float))
    doc, path = predict.merge_scale([(new, "n.json"), (wide, "w.json"), (old, "o.json"), (base, "a.json")])
    assert [r["run"] for r in doc["rows"]] == ["2026-12-06T04:00"] and "prompt_range" not in doc["grid"]
    assert doc["contexts"] == [] and [r["file"] for r in doc["ragged"]] == ["n.json", "w.json"]  # newest a range
    assert predict.ragged_runs(doc) == doc["ragged"] and path == "a.json + n.json + w.json"
    alone, _ = predict.merge_scale([(new, "n.json")])  # no uniform run: the ragged one stands in, and says so
    assert alone["grid"]["prompt_range"] == [40, 600] and predict.ragged_runs(alone)[0] is alone
    short = _ragged(40, 600, "2026-12-06T10:00", (64,), float)
    short["grid"]["short_rows"] = 32  # the same range with one-token stand-ins for idle rows: a run of its own
    doc, _ = predict.merge_scale([(short, "s.json"), (new, "n.json"), (base, "a.json")])
    assert sorted(r["file"] for r in doc["ragged"]) == ["n.json", "s.json"]


def test_a_ragged_run_changes_a_c64_cells_step_and_leaves_a_c1_cells_alone():
    """Uniform costs c ms a step; ragged runs at c = 64 whose steps attend to 332 and 652 tokens: 1.5c and 2.5c."""
    scale = {"grid": {"prompt_tokens": 160, "new_tokens": 24}, "costs": _costs("smollm2-135m", (1, 8, 64))}
    answers = {"output_tokens": 2240, "num_prompts": 10}  # 224-token answers: a step's context 300 + 112 = 412
    rows = ([_row(m, 2, 64, num_steps=10, row_steps=640, continuous=True, **answers) for m in ("eagle3", "peagle")]
            + [_row("peagle", 2, 64, num_steps=10, row_steps=360, **answers), _row("peagle", 2, 1, **answers)])
    bench = {"config": {"prompts": {"code": {"mean_tokens": 300.0}}}, "rows": rows}
    before = {(c["concurrency"], c["rows"]): c for c in predict.check_against_bench(scale, bench) if c["method"] == "peagle"}
    scale["ragged"] = [_ragged(40, 600, "d", (64,), lambda c: 1.5 * c), _ragged(40, 1240, "d", (64,), lambda c: 2.5 * c)]
    after = {(c["concurrency"], c["rows"]): c for c in predict.check_against_bench(scale, bench) if c["method"] == "peagle"}
    assert before[64, 64.0]["predicted_step_ms"] == pytest.approx(64.0) and before[64, 64.0]["step_runs"] == "uniform"
    assert after[64, 64.0]["predicted_step_ms"] == pytest.approx(1.75 * 64)  # a quarter of the way from 332 to 652
    assert after[64, 64.0]["step_runs"] == "ragged"
    assert after[64, 64.0]["predicted_tps"] == pytest.approx(before[64, 64.0]["predicted_tps"] / 1.75)
    # 36 busy rows: halfway from the uniform step at c = 8 (8 ms) to the ragged one at c = 64 (112 ms)
    assert before[64, 36.0]["predicted_step_ms"] == pytest.approx(36.0)
    assert after[64, 36.0]["predicted_step_ms"] == pytest.approx(60.0) and after[64, 36.0]["step_runs"] == "ragged"
    assert after[1, 1.0] == before[1, 1.0] and after[1, 1.0]["step_runs"] == "uniform"  # one request is never ragged
    assert after[1, 1.0]["predicted_step_ms"] == pytest.approx(1.0)
    unknown = predict.check_against_bench(scale, {"rows": rows})  # no prompt lengths recorded: the uniform runs
    assert {c["step_runs"] for c in unknown} == {"uniform"}
    # a run with one-token stand-ins for idle rows joins only the fit: the ragged path leaves it out
    stand_in = _ragged(40, 600, "d", (64,), lambda c: 9.0 * c)
    stand_in["grid"]["short_rows"] = 32
    scale["ragged"].append(stand_in)
    with_short = {(c["concurrency"], c["rows"]): c for c in predict.check_against_bench(scale, bench)
                  if c["method"] == "peagle"}
    assert with_short == after


def _fit_scale():
    """Uniform runs at 160- and 640-token prompts (steps at 172 and 652 tokens) and two ragged runs that record
    their contexts, at c = 64: a step of 1 + 0.01 · mean + 0.02 · longest ms."""
    def step(mean, longest):
        return lambda c: 1.0 + 0.01 * mean + 0.02 * longest

    scale = {"grid": {"prompt_tokens": 160, "new_tokens": 24}, "costs": _costs("smollm2-135m", (1, 64), step(172, 172))}
    scale["contexts"] = [{"grid": {"prompt_tokens": 640, "new_tokens": 24},
                          "costs": _costs("smollm2-135m", (1, 64), step(652, 652))}]
    scale["ragged"] = []
    for lo, hi, mean, longest in ((40, 600, 332.0, 592.0), (40, 1240, 652.0, 1252.0)):
        run = _ragged(lo, hi, "d", (64,), step(mean, longest))
        for r in run["costs"]:
            r.update(mean_context=mean, longest_context=longest)
        scale["ragged"].append(run)
    return scale


def test_a_row_that_records_its_contexts_reads_the_fit_and_one_that_does_not_reads_the_ragged_runs():
    """The fit at c for a batch that kept its c rows, the fit toward fewer rows for a static batch that dropped
    finished ones, the ragged runs for a row that records no contexts."""
    scale = _fit_scale()
    answers = {"output_tokens": 2240, "num_prompts": 10, "num_steps": 10}
    contexts = {"mean_context": 400.0, "longest_context": 1000.0, "mean_row_context": 420.0,
                "longest_row_context": 1100.0}
    old = _row("peagle", 2, 64, row_steps=640, continuous=True, **answers)
    new, static = ({**old, **contexts}, {**old, **contexts, "row_steps": 360, "continuous": False})
    rows = [old, new, static]
    bench = {"config": {"prompts": {"code": {"mean_tokens": 300.0}}}, "rows": rows + [{**r, "method": "eagle3"} for r in rows]}
    was, fit, fewer = [c for c in predict.check_against_bench(scale, bench) if c["method"] == "peagle"]
    # the fit at every row the steps ran: 1 + 0.01 · 420 + 0.02 · 1100
    assert fit["step_runs"] == "fit" and fit["predicted_step_ms"] == pytest.approx(27.2)
    assert (fit["context"], fit["longest_context"]) == (400.0, 1100.0)
    # a row of no recorded contexts: the ragged runs at its estimated context, the numbers of the old path
    alone = predict.check_against_bench(scale, {**bench, "rows": [old, {**old, "method": "eagle3"}]})
    assert was == alone[1] and was["step_runs"] == "ragged" and was["longest_context"] is None
    assert was["predicted_step_ms"] == pytest.approx(1.0 + 0.01 * 412 + 0.02 * (592 + 660 * 80 / 320))
    # a static batch that ran 36 rows a step on average: linear in rows from the uniform runs' one-row step at its
    # mean context (1 + 0.03 · 420, between the runs at 172 and 652 tokens) to the fit's 64-row step
    assert fewer["step_runs"] == "fit" and fewer["rows"] == 36.0 and fewer["context"] == 400.0
    assert fewer["predicted_step_ms"] == pytest.approx(13.6 + (36 - 1) / (64 - 1) * (27.2 - 13.6))
    from peagle_lab.lab import scale_report

    text = scale_report.context_text(scale, [fit, fewer])
    assert "2 of 2 cells, at c > 1 with the mean and longest context" in text
    assert "; 1 of them, static batches of fewer rows a step, linear in rows" in text
    assert predict.fit_contexts(static) == (420.0, 1100.0) and predict.fit_contexts(old) is None


def test_the_fit_reads_each_k_within_the_attention_tile_its_rows_fill():
    """Steps of K ms up to K = 3 and K + 10 ms from K = 5 at c = 64 (the same at every context): on an H100 a
    SmolLM2 K = 4 verify pass fills the 16-row tile of K = 1 and 3, so the check reads it from them, not
    halfway to K = 5's step; a device the lab has no preset for reads K linearly."""
    def run(grid, contexts):
        costs = [{"shape": "smollm2-135m", "method": m, "depth": 1 if m == "eagle3" else 4, "k": k,
                  "concurrency": 64, **{p: 0.0 for p in ("verify_ms", "prep_ms", "draft_ms", "host_ms")},
                  "step_ms": k + (10.0 if k >= 5 else 0.0), **contexts}
                 for m in ("eagle3", "peagle") for k in (1, 3, 5, 8)]
        return {"grid": {"new_tokens": 24, **grid}, "costs": costs}
    uniform = [run({"prompt_tokens": n}, {}) for n in (160, 640)]
    ragged = run({"prompt_tokens": 300, "prompt_range": [40, 600]}, {"mean_context": 300.0, "longest_context": 590.0})
    scale = {**uniform[0], "device": "NVIDIA H100 80GB HBM3", "contexts": uniform[1:], "ragged": [ragged]}
    row = _row("peagle", 4, 64, num_steps=10, row_steps=640, continuous=True, mean_context=400.0,
               longest_context=900.0, per_position_acceptance=[0.5, 0.25, 0.1, 0.05])
    bench = {"rows": [row, {**row, "method": "eagle3"}]}
    on_h100 = predict.check_against_bench(scale, bench)
    assert [c["predicted_step_ms"] for c in on_h100] == pytest.approx([4.0, 4.0])
    unknown = predict.check_against_bench({**scale, "device": "some GPU"}, bench)
    assert [c["predicted_step_ms"] for c in unknown] == pytest.approx([9.0, 9.0])

"""The answer-length goals (peagle_lab.bench.answer_length) read from a folder of one bench.json of both workloads."""
from __future__ import annotations

import json
import shutil

from peagle_lab.bench import answer_length
from peagle_lab.bench.archive import RESULTS, run_folders


def _continuous_folder():
    """The newest committed answer-length run whose rows batched continuously (one bench.json, both workloads)."""
    runs = [r.path for r in run_folders(topic="answer_length")
            if json.loads((r.path / "bench.json").read_text())["config"].get("continuous")]
    return max(runs, key=lambda p: p.name)


def test_a_folder_of_one_bench_json_is_read_per_workload(tmp_path):
    src = _continuous_folder()
    shutil.copy(src / "bench.json", tmp_path / "bench.json")
    results = answer_length.load_folder(tmp_path)
    whole = json.loads((src / "bench.json").read_text())
    assert set(results) == {r["workload"] for r in whole["rows"]} & set(answer_length.WORKLOADS)
    for w, res in results.items():
        assert {r.workload for r in res.rows} == {w} and res.config["workloads"] == [w]
        assert len(res.rows) == sum(r["workload"] == w for r in whole["rows"])
    summary = answer_length.summarize(results)
    code = next(c for c in summary["columns"] if c["workload"] == "code")
    best = {m: max((r for r in whole["rows"] if r["workload"] == "code" and r["method"] == m), key=lambda r: r["tps"])
            for m in ("eagle3", "peagle")}
    assert code["p_over_e3"] == round(round(best["peagle"]["tps"], 1) / round(best["eagle3"]["tps"], 1), 3)


def test_a_folder_without_any_bench_json_reads_nothing(tmp_path):
    assert answer_length.load_folder(tmp_path) == {}
    assert answer_length.main([str(tmp_path)]) == 2


def test_the_committed_summary_matches_its_bench_json():
    src = _continuous_folder()
    assert json.loads((src / "summary.json").read_text()) == json.loads(json.dumps(
        answer_length.summarize(answer_length.load_folder(src))))
    assert src.is_relative_to(RESULTS)


def test_the_printed_summary_names_each_method_and_gives_plain_decoding_no_k():
    """One line per (workload, c): plain decoding's tok/s alone (it drafts nothing), each speculative method's tok/s
    at its best K with that K and its AL, then P-EAGLE / EAGLE-3; then one line per goal."""
    src = _continuous_folder()
    summary = json.loads((src / "summary.json").read_text())
    lines = answer_length.render(summary).splitlines()
    assert len(lines) == len(summary["columns"]) + len(summary["goals"])
    for line, col in zip(lines, summary["columns"]):
        b = col["best"]
        assert line.startswith(f"{col['workload']:9s} c = {col['c']:<3d} plain {b['baseline']['tps']:.0f} tok/s  ")
        assert "K=0" not in line and "AL 1.00" not in line and "baseline" not in line
        assert f"EAGLE-3 {b['eagle3']['tps']:.0f} tok/s (K={b['eagle3']['k']}, AL {b['eagle3']['al']:.2f})" in line
        assert f"P-EAGLE {b['peagle']['tps']:.0f} tok/s (K={b['peagle']['k']}, AL {b['peagle']['al']:.2f})" in line
        assert line.endswith(f"P-EAGLE/EAGLE-3 {col['p_over_e3']:.2f}x")
    assert lines[len(summary["columns"])].startswith(f"[{summary['goals'][0]['status']:4s}] ")


def test_a_c64_goal_names_how_its_run_batched_and_a_run_without_c64_names_nothing(tmp_path):
    """The c = 64 goal reads one static batch or continuous batching; its line says which, so a static run's MISS
    is not read as the paper's mode (its vLLM runs batch continuously)."""
    whole = json.loads((_continuous_folder() / "bench.json").read_text())
    for continuous, c, mode in ((4, 64, " (batched continuously)"), (0, 64, " (static batches)"), (0, 1, "")):
        doc = {**whole, "config": {**whole["config"], "continuous": continuous},
               "rows": [{**r, "concurrency": c} for r in whole["rows"] if r["workload"] == "code"]}
        (tmp_path / "bench.json").write_text(json.dumps(doc))
        goals = answer_length.summarize(answer_length.load_folder(tmp_path))["goals"]
        c64 = next(g for g in goals if ", c = 64" in g["goal"])
        assert c64["goal"] == f"P-EAGLE/EAGLE-3 >= 1.15x, code, c = 64{mode}"
        assert (c64["status"] == "n/a") == (c == 1)

"""Notebook 8's texts on contexts (peagle_lab.lab.scale_report): the check's contexts and ragged attention."""
from __future__ import annotations

import json

import pytest

from peagle_lab.lab import scale_report


def _attention_file(tmp_path, rows, shapes):
    doc = {"date": "2026-12-06T09:33:38+00:00", "attention": rows,
           "command": "python scripts/gpu/decode_attention_gpu.py --skip-engine --shapes " + " ".join(shapes)
                      + " --out /x/ragged.json"}
    path = tmp_path / "decode_attention_ragged.json"
    path.write_text(json.dumps(doc))
    return path


def _row(c, T, mean, us, **extra):
    return {"c": c, "T": T, "S": 1536, "kv_len_mean": mean, "triton_us": us, **extra}


def test_ragged_rows_take_their_ranges_from_the_command_and_sit_beside_uniform_ones(tmp_path):
    shapes = ["64,4,1536,300,300", "64,4,1536,50,550", "64,4,1536,550,550", "64,1,1536,50,550"]
    path = _attention_file(tmp_path, [_row(64, 4, 300.0, 10.0), _row(64, 4, 296.0, 15.0), _row(64, 4, 550.0, 20.0),
                                      _row(64, 1, 301.0, 9.0)], shapes)
    rows, where = scale_report.ragged_attention(path)
    assert [(r["shortest"], r["longest"]) for r in rows] == [(300, 300), (50, 550), (550, 550), (50, 550)]
    text = scale_report.ragged_attention_text(rows)
    assert "contexts 50-550 (mean 296) 15.0; uniform 300: 10.0 (1.50x); uniform 550: 20.0" in text
    assert "1 query token" not in text  # no uniform batch at T = 1 to set it beside


def test_rows_that_record_their_range_need_no_command(tmp_path):
    path = _attention_file(tmp_path, [_row(8, 2, 100.0, 5.0, shortest=100, longest=100),
                                      _row(8, 2, 110.0, 6.0, shortest=20, longest=200)], [])
    rows, _ = scale_report.ragged_attention(path)
    assert scale_report.ragged_attention_text(rows).endswith("uniform 100: 5.0 (1.20x)")


def test_the_committed_ragged_measurement_is_found():
    rows, where = scale_report.ragged_attention()
    assert where.startswith("docs/results/") and where.endswith(scale_report.RAGGED_FILE)
    assert any(r["shortest"] < r["longest"] for r in rows) and any(r["shortest"] == r["longest"] for r in rows)


def test_context_text_names_the_runs_and_each_cells_context():
    scale = {"grid": {"prompt_tokens": 160, "new_tokens": 24},
             "contexts": [{"grid": {"prompt_tokens": 640, "new_tokens": 24}, "costs": []}]}
    cells = [{"workload": "code", "concurrency": 64, "context": ctx} for ctx in (290.0, 310.0)]
    cells.append({"workload": "chat", "concurrency": 1, "context": None})
    text = scale_report.context_text(scale, cells)
    assert "steps attending to 172, 652 tokens" in text and "ragged" not in text
    assert "code, c = 64: steps attend to 290-310 tokens" in text and "chat" not in text
    scale["ragged"] = [{"grid": {"prompt_tokens": 300, "prompt_range": [50, 550], "new_tokens": 24}, "costs": []}]
    cells[0]["step_runs"] = "ragged"
    assert "ragged runs (prompts drawn from 50-550 tokens): 1 of 3 cells" in scale_report.context_text(scale, cells)
    assert "fit" not in scale_report.context_text(scale, cells)
    scale["ragged"].append({"grid": {"prompt_tokens": 525, "prompt_range": [50, 1000], "short_rows": 32,
                                     "new_tokens": 24}, "costs": []})
    assert "(prompts drawn from 50-550, 50-1000 (32 of one token) tokens)" in scale_report.context_text(scale, cells)
    cells[1].update(step_runs="fit", longest_context=1000.0, busy_share=0.5)
    text = scale_report.context_text(scale, cells)
    assert "1 of 3 cells, at c > 1 with the mean and longest context of every row" in text
    assert ("code, c = 64: steps attend to 290-310 tokens on average over busy rows; the longest row 1000-1000; "
            "busy rows 50-50 % of the rows a step runs") in text


@pytest.mark.parametrize("command, expected", [("x --shapes 1,1,8,2,4 9,1,8 --out y", [(2, 4), (0, 0)]),
                                               ("x --out y", [])])
def test_shapes_are_read_from_the_command(command, expected):
    assert scale_report._shapes_of(command) == expected


def test_forced_split_counts_sit_beside_the_kernels_own_choice(tmp_path):
    rows = [_row(64, 4, 700.0, 36.0, shortest=50, longest=1450, **{"triton[splits=4]_us": 30.0}),
            _row(64, 4, 750.0, 24.0, shortest=750, longest=750, **{"triton[splits=4]_us": 30.0})]
    path = _attention_file(tmp_path, rows, [])
    parsed, _ = scale_report.ragged_attention(path)
    assert [r["variants"] for r in parsed] == [{"splits=4": 30.0}, {"splits=4": 30.0}]
    text = scale_report.splits_text(parsed)
    assert "contexts 50-1450 (mean 700): own 36.0; splits=4 30.0 (1.20x)" in text
    assert "uniform 750: own 24.0; splits=4 30.0 (0.80x)" in text


def test_the_committed_split_measurement_is_found():
    rows, where = scale_report.ragged_attention(file=scale_report.SPLITS_FILE)
    assert where.endswith(scale_report.SPLITS_FILE) and all(r["variants"] for r in rows)


def _fit_run(mean, longest):
    """A scale-lab run of one EAGLE-3 K = 1 cell at c = 64 whose step is 1 ms + mean / 1000 + longest / 500."""
    step = 1 + mean / 1000 + longest / 500
    return {"grid": {}, "costs": [{"shape": "s", "method": "eagle3", "depth": 1, "k": 1, "concurrency": 64,
                                   "mean_context": mean, "longest_context": longest, "verify_ms": step,
                                   "prep_ms": 0.0, "draft_ms": 0.0, "host_ms": 0.0, "step_ms": step}]}


def test_the_fit_table_and_the_longest_context_a_measured_step_needs():
    from peagle_lab.lab import context_fit_report as report

    scale = {**_fit_run(100, 100), "contexts": [_fit_run(200, 200)], "ragged": [_fit_run(100, 300)]}
    text = report.fit_table_text(scale, "eagle3", 1, shape="s")
    assert text.splitlines()[2:5] == ["    100      100     1.30    1.30", "    200      200     1.60    1.60",
                                      "    100      300     1.70    1.70"]
    assert text.endswith("fit: step = 1.00 ms + 1.00 µs x mean + 2.00 µs x longest")
    row = {"method": "eagle3", "k": 1, "concurrency": 64, "temperature": 0, "workload": "code",
           "step_ms": 1 + 0.3 + 1.0, "output_tokens": 200, "num_prompts": 1}
    assert round(report.longest_needed(scale, row, 300.0, shape="s")) == 500
    bench = {"config": {"prompts": {"code": {"mean_tokens": 200.0, "max_tokens": 400}}, "max_new_tokens": 1024},
             "rows": [row]}
    assert report.longest_needed_text(bench=bench, scale=scale, shape="s").splitlines()[-1].split() == \
        ["code", "EAGLE-3", "1", "2.30", "300", "500", "—", "1424"]
    # a row that records its contexts over every row is read at them: mean 250, so the step needs 525
    recorded = {**row, "mean_context": 300.0, "longest_context": 700.0, "mean_row_context": 250.0,
                "longest_row_context": 800.0}
    assert report.longest_needed_text(bench={**bench, "rows": [recorded]}, scale=scale,
                                      shape="s").splitlines()[-1].split() == \
        ["code", "EAGLE-3", "1", "2.30", "250", "525", "800", "1424"]


def test_the_verify_pass_by_k_names_each_programs_tile():
    from peagle_lab.lab import context_fit_report as report

    row = lambda w, m, k, ms: {"workload": w, "method": m, "k": k, "concurrency": 64, "temperature": 0, "verify_ms": ms}
    bench = {"rows": [row("code", "eagle3", 4, 1.76), row("code", "eagle3", 5, 2.14), row("code", "peagle", 5, 2.19),
                      row("code", "baseline", 0, 1.8), {**row("code", "peagle", 4, 9.0), "concurrency": 1}]}
    lines = report.verify_by_k_text(bench).splitlines()
    assert lines[1].split() == ["K", "4", "5"]
    assert lines[2].split() == ["query", "rows", "15", "18"]  # SmolLM2: 9 query heads over 3 K/V heads
    assert lines[3].split() == ["tile", "rows", "16", "32"]
    assert lines[4:] == ["code EAGLE-3         1.76   2.14", "code P-EAGLE            —   2.19"]

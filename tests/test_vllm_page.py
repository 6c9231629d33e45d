"""docs/vllm.md's H200 tables are copies of docs/results/h200/vllm_gpu.json: this test fails when they drift apart.

The page types the per-cell "ours / vLLM" table and the P-EAGLE / EAGLE-3 ratios inside each engine;
each figure must round to what the committed comparison holds, so replacing the JSON without the page
(or editing the page by hand) is caught.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/vllm.md"
RESULT = ROOT / "docs/results/h200/vllm_gpu.json"
COLUMNS = [(w, c) for w in ("chat", "code") for c in (1, 8, 64)]
METHODS = {"plain": "baseline", "EAGLE-3": "eagle3", "P-EAGLE": "peagle"}


def table_rows(first_cells: tuple[str, ...]) -> list[list[str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] in first_cells:
            rows.append(cells)
    return rows


def number(text: str) -> float:
    return float(text.replace(",", ""))


def test_ours_over_vllm_table_matches_the_committed_comparison():
    cells = {(x["workload"], x["method"], x["k"], x["concurrency"]): x
             for x in json.loads(RESULT.read_text())["comparison"]["cells"]}
    rows = [r for r in table_rows(tuple(METHODS)) if len(r) == 2 + len(COLUMNS) and "/" in r[2]]
    assert len(rows) == 7, rows
    for row in rows:
        method, k = METHODS[row[0]], 0 if row[1] == "—" else int(row[1])
        for (workload, c), text in zip(COLUMNS, row[2:]):
            m = re.fullmatch(r"([\d,]+) / ([\d,]+) \(([\d.]+)×\)", text)
            assert m, f"unreadable cell {text!r}"
            x = cells[(workload, method, k, c)]
            where = f"{row[0]} K={row[1]} {workload} c={c}"
            assert round(x["tps_ours"]) == number(m.group(1)), where
            assert round(x["tps_vllm"]) == number(m.group(2)), where
            assert f"{x['ours_over_vllm']:.2f}" == m.group(3), where


def test_within_engine_ratios_match_the_committed_comparison():
    within = {(x["engine"], x["workload"], x["concurrency"]): x
              for x in json.loads(RESULT.read_text())["comparison"]["within_engine"]}
    engines = {"vLLM 0.24.0 (P-EAGLE on the V1 runner, EAGLE-3 on V2)": "vllm", "peagle_lab": "peagle_lab"}
    rows = table_rows(tuple(engines))
    assert len(rows) == 2, rows
    for row in rows:
        for (workload, c), text in zip(COLUMNS, row[1:]):
            ratio = within[(engines[row[0]], workload, c)]["peagle_over_eagle3"]
            assert f"{ratio:.2f}×" == text, f"{row[0]} {workload} c={c}: page {text}, JSON {ratio:.3f}"


def test_step_times_at_c1_match_the_committed_comparison():
    """The chat c = 1 step table: our column and vLLM's (V2 for plain and EAGLE-3, V1 for P-EAGLE) from the JSON."""
    cells = {(x["method"], x["k"]): x for x in json.loads(RESULT.read_text())["comparison"]["cells"]
             if x["workload"] == "chat" and x["concurrency"] == 1}
    names = {"plain": ("baseline", 0), "EAGLE-3, K = 3": ("eagle3", 3), "EAGLE-3, K = 7": ("eagle3", 7),
             "P-EAGLE, K = 3": ("peagle", 3), "P-EAGLE, K = 7": ("peagle", 7)}
    rows = [r for r in table_rows(tuple(names)) if len(r) == 4]
    assert len(rows) == len(names), rows
    for row in rows:
        x = cells[names[row[0]]]
        assert f"{x['step_ms_ours']:.2f}" == row[1], row
        vllm = row[3] if row[0].startswith("P-EAGLE") else row[2]  # vLLM 0.24 drafts in parallel on V1 only
        assert f"{x['step_ms_vllm']:.2f}" == vllm, row

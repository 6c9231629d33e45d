"""docs/vllm.md's H200 tables are copies of the newest docs/results/h200/vllm/<date>-<commit>/vllm_gpu.json:
this test fails when they drift apart.

The page types the per-cell "ours / vLLM" table and the P-EAGLE / EAGLE-3 ratios inside each engine;
each figure must round to what the committed comparison holds, so replacing the JSON without the page
(or editing the page by hand) is caught.
"""
from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from pathlib import Path

from peagle_lab.bench.archive import latest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/vllm.md"
RESULT = latest("h200", "vllm") / "vllm_gpu.json"
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


# The prose after the tables quotes figures too: each is recomputed here from the committed JSON and must appear,
# word for word, in the H200 section (line breaks ignored), so a new run or a hand edit cannot leave one stale.
SECTION = "### Measured: same H200"
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
NAMES = {"eagle3": "EAGLE-3", "peagle": "P-EAGLE"}


def section_text() -> str:
    """docs/vllm.md from SECTION to the end, every run of whitespace one space."""
    return " ".join(PAGE.read_text().split(SECTION, 1)[1].split())


def assert_quoted(*phrases: str) -> None:
    text = section_text()
    missing = [p for p in phrases if p not in text]
    assert not missing, f"docs/vllm.md's H200 section does not say (the committed JSON gives): {missing}"


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def by_cell(items: list[dict]) -> dict:
    return {(x["workload"], x["method"], x["k"], x["concurrency"]): x for x in items}


def v1_runner_rows() -> dict:
    """The second run: plain decoding and EAGLE-3 K = 3 on vLLM's V1 runner, beside vllm_gpu.json."""
    return by_cell(load(RESULT.parent / "vllm_gpu_v1_runner.json")["rows"])


def runner_folder() -> Path:
    from peagle_lab.bench.archive import latest

    return latest("h200", "vllm_runner")


def test_the_v1_runner_figures_in_the_tables_match_the_second_run():
    cells, v1 = by_cell(load(RESULT)["comparison"]["cells"]), v1_runner_rows()
    row = table_rows(("vLLM 0.24.0, both on the V1 runner (K = 3)",))
    assert len(row) == 1, row
    for (workload, c), text in zip(COLUMNS, row[0][1:]):  # P-EAGLE K = 3 (V1 in the first run) over EAGLE-3 K = 3 on V1
        ratio = cells[(workload, "peagle", 3, c)]["tps_vllm"] / v1[(workload, "eagle3", 3, c)]["tps"]
        assert f"{ratio:.2f}×" == text, f"{workload} c={c}: page {text}, JSON {ratio:.3f}"
    steps = {r[0]: r[3] for r in table_rows(("plain", "EAGLE-3, K = 3")) if len(r) == 4}
    assert steps == {"plain": f"{v1[('chat', 'baseline', 0, 1)]['step_ms']:.2f}",
                     "EAGLE-3, K = 3": f"{v1[('chat', 'eagle3', 3, 1)]['step_ms']:.2f}"}


def test_the_run_described_above_the_tables_is_the_committed_one():
    doc = load(RESULT)
    info, settings, cells = doc["run_info"], doc["config"]["vllm_settings"], doc["comparison"]["cells"]
    startup = [s["startup_s"] for s in settings.values()]
    assert_quoted(f"`{RESULT.relative_to(ROOT)}`", f"{len(settings)} engines ({info['vllm_s']:.0f} s in all",
                  f"({info['ours_s']:.0f} s for all {len(cells)} cells)",
                  f"{doc['config']['min_prompts']} a cell at c = 1 and 8, "
                  f"{doc['agreement']['chat/baseline/0/64']['requests']} at c = 64",
                  f"vLLM engines started in {min(startup):.0f}–{max(startup):.0f} s each",
                  f"The whole side-by-side run took {info['wall_s'] / 60:.1f} min (`run_info.wall_s`)")


def test_the_step_cost_bullets_quote_the_committed_figures():
    from peagle_lab.lab import paper

    doc, v1 = load(RESULT), v1_runner_rows()
    cells = by_cell(doc["comparison"]["cells"])
    step = {key: (x["step_ms_ours"], x["step_ms_vllm"]) for key, x in cells.items() if key[3] == 1}
    ratios = [x["ours_over_vllm"] for x in cells.values()]
    plain_ours, plain_vllm = step[("chat", "baseline", 0, 1)]
    wide = cells[("chat", "baseline", 0, 64)]
    v1_plain, v1_eagle3 = v1[("chat", "baseline", 0, 1)]["step_ms"], v1[("chat", "eagle3", 3, 1)]["step_ms"]
    per_pass = {(w, e): (step[(w, "eagle3", 7, 1)][e] - step[(w, "eagle3", 3, 1)][e]) / 4
                for w in ("chat", "code") for e in (0, 1)}
    peagle_v1 = {k: step[("chat", "peagle", k, 1)][1] for k in (3, 7)}
    both_v1 = [cells[(w, "peagle", 3, c)]["tps_vllm"] / v1[(w, "eagle3", 3, c)]["tps"] for w, c in COLUMNS]
    within = {x["workload"]: x["peagle_over_eagle3"] for x in doc["comparison"]["within_engine"]
              if x["engine"] == "peagle_lab" and x["concurrency"] == 1}
    c1 = next(p for p in paper.PUBLISHED if p.metric == "speedup_c1")  # MT-Bench / HumanEval / SPEED-Bench
    published = [float(v) for v in re.findall(r"([\d.]+)×", c1.value)]
    ours_pass = sorted(per_pass[(w, 0)] for w in ("chat", "code"))
    assert_quoted(
        f"Our engine is {min(ratios):.1f}–{max(ratios):.1f}× faster than vLLM in every cell",
        f"our whole plain step takes {plain_ours:.2f} ms", f"vLLM's plain step takes {plain_vllm:.2f} ms "
        f"({wide['step_ms_vllm']:.1f} ms at c = 64, against our {wide['step_ms_ours']:.1f} ms)",
        f"Its V1 runner's plain step of {v1_plain:.2f} ms shows that the runner alone accounts for about "
        f"{plain_vllm - v1_plain:.1f} ms of it",
        f"its step grows by {per_pass[('chat', 0)]:.2f} (chat) and {per_pass[('code', 0)]:.2f} ms (code) a pass in our "
        f"engine and by {per_pass[('chat', 1)]:.2f} (chat) and {per_pass[('code', 1)]:.2f} ms (code) a pass on vLLM's V2",
        f"EAGLE-3 at K = 3 takes {v1_eagle3 - peagle_v1[3]:.1f} ms more than P-EAGLE at K = 3 "
        f"({v1_eagle3:.2f} against {peagle_v1[3]:.2f} ms)",
        f"that is about {(v1_eagle3 - peagle_v1[3]) / 2:.1f} ms for each of EAGLE-3's two extra passes",
        f"P-EAGLE beats EAGLE-3 by {min(both_v1):.2f}–{max(both_v1):.2f}×",
        f"near its size ({min(published):.2f}–{max(published):.2f}× at c = 1 on a B200",
        f"P-EAGLE's step still grows from K = 3 to 7, by {peagle_v1[7] - peagle_v1[3]:.1f} ms",
        f"A pass costs {ours_pass[0]:.2f}–{ours_pass[1]:.2f} ms",
        f"with these heads {within['chat']:.2f}× / {within['code']:.2f}× at c = 1 (chat / code)")


def test_the_greedy_output_paragraph_quotes_the_committed_agreement():
    doc = load(RESULT)
    out, agreement = doc["comparison"]["outputs"], doc["agreement"]
    margins = [m for a in agreement.values() for m in a["margins"]]
    worst_rank = [max(m["rank_ours"], m["rank_vllm"]) for m in margins]
    logits = [v for m in margins for v in (m["logit_ours"], m["logit_vllm"])]
    bf16_step = [2.0 ** (math.floor(math.log2(v)) - 7) for v in (min(logits), max(logits))]  # 8 significant bits
    plain = {w: agreement[f"{w}/baseline/0/1"] for w in ("chat", "code")}
    equal = {w: f"{round(a['equal_rate'] * a['requests'])} of {a['requests']}" for w, a in plain.items()}
    assert len(margins) == out["first_differences_checked"]
    assert_quoted(
        f"Equal token for token on {out['equal_rate']:.0%} of the {out['requests_compared']} requests compared "
        f"({out['token_agreement']:.0%} of tokens come before the first difference)".replace("%", " %"),
        f"(chat: {equal['chat']} prompts equal at c = 1, code: {equal['code']})",
        f"At each of the {len(margins)} first differences",
        f"they are its top two in {sum(r <= 1 for r in worst_rank)} cases and within its top "
        f"{WORDS[max(worst_rank) + 1]} in all",
        f"the logit gap is {out['first_difference_gap_median']:.2f} at the median and "
        f"{out['first_difference_gap_max']:.2f} at most",
        f"these logits ({min(logits):.1f}–{max(logits):.0f}, median {statistics.median(logits):.0f}) are rounded in "
        f"steps of {bf16_step[0]:.2f}–{bf16_step[1]:.2f}")


def _cell_list(keys: list[tuple]) -> str:
    """('code', 'peagle', 3, 8), ('code', 'peagle', 3, 64), … as 'P-EAGLE K = 3 c = 8 and 64, …'."""
    parts, last = [], None
    for (method, k), group in itertools.groupby(sorted(keys, key=lambda x: (x[1], x[2], x[3])), key=lambda x: x[1:3]):
        name = "" if method == last else NAMES[method] + " "
        parts.append(f"{name}K = {k} c = {' and '.join(str(x[3]) for x in group)}")
        last = method
    return ", ".join(parts)


def test_the_acceptance_paragraphs_quote_the_committed_comparisons():
    cells = by_cell(load(RESULT)["comparison"]["cells"])
    spec = {key: x for key, x in cells.items() if key[1] != "baseline"}
    missed = {key: x for key, x in spec.items() if not x["al_within_3pct"]}
    short = [(1 - x["al_ratio"]) * 100 for x in missed.values()]
    assert {k[0] for k in missed} == {"code"} and {k[3] for k in missed} <= {1, 8} and min(short) > 0
    same = by_cell(load(runner_folder() / "same_text.json")["comparison"]["same_text"])
    ratio = {key: x["al_ratio"] for key, x in same.items()}
    rerun = {key: abs(x["al_vllm"] / cells[key]["al_vllm"] - 1) * 100 for key, x in same.items()}
    differ = sorted(key for key, d in rerun.items() if d > 1e-9)
    eagle3 = [r for key, r in ratio.items() if key[1] == "eagle3"]
    assert set(same) == set(spec) and {k[0] for k in differ} == {"code"} and min(eagle3) > 1
    v1 = {key: x for key, x in v1_runner_rows().items() if key[1] == "eagle3"}
    v1_differ = [key for key, x in v1.items() if x["acceptance_length"] != cells[key]["al_vllm"]]
    assert len(v1_differ) == 1
    fp32 = load(runner_folder() / "vs_ours_cpu_fp32.json")["comparison"]["outputs"]
    assert_quoted(
        f"our AL is within ±3 % of vLLM's in {len(spec) - len(missed)} of the {len(spec)} speculative cells",
        f"the other {len(missed)} are code cells of 8 prompts at c = 1 and 8, where ours is "
        f"{min(short):.1f}–{max(short):.1f} % lower",
        f"vLLM's AL in that run equals this run's in {len(same) - len(differ)} of the {len(same)} speculative cells, "
        f"including all {sum(k[3] == 1 for k in same)} at c = 1",
        f"the other {len(differ)} differ by {min(rerun[k] for k in differ):.1f}–{max(rerun[k] for k in differ):.1f} % "
        f"(code: {_cell_list(differ)})",
        f"within ±3 % of vLLM's in all {len(same)} speculative cells: {min(ratio.values()):.3f}–"
        f"{max(ratio.values()):.3f}× (median {statistics.median(ratio.values()):.3f})",
        f"For the {len(missed)} code cells that missed above it is {min(ratio[k] for k in missed):.3f}–"
        f"{max(ratio[k] for k in missed):.3f}×",
        f"EAGLE-3's same-text ratios all sit slightly above 1 ({min(eagle3):.3f}–{max(eagle3):.3f}×)",
        f"(gap median {fp32['first_difference_gap_median']:.3f}, at most {fp32['first_difference_gap_max']:.2f}, "
        f"over {fp32['first_differences_checked']})",
        f"EAGLE-3's AL there equals its V2 AL in {len(v1) - 1} of {len(v1)} cells",
        f"{v1_differ[0][0]} c = {v1_differ[0][3]}: {v1[v1_differ[0]]['acceptance_length']:.3f} against "
        f"{cells[v1_differ[0]]['al_vllm']:.3f}",
        f"`{(runner_folder() / 'same_text.json').relative_to(ROOT)}`")

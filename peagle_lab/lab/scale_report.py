"""Notebook 8's printed tables: the scale lab's step costs, the check against our sweep, the predicted
speed-ups beside the paper's, and what the rest of the distance to the paper's speed-up would take.

Every function returns text computed from the committed JSON (``predict.load_scale``, a K sweep's
``bench.json``); the notebook prints it, so no figure on the page is typed by hand.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import predict
from .kmodel import METHODS
from .paper import SPEED_BENCH_SPEEDUP

__all__ = ["scale_summary", "step_table", "layer_and_moe_text", "check_table", "speedup_text",
           "distance_report", "baseline_text", "acceptance_vs_shape"]

NAMES = {"eagle3": "EAGLE-3", "peagle": "P-EAGLE"}


def scale_summary(scale: Mapping, path: str) -> str:
    """Where the scale lab's numbers come from, and what it measured."""
    shapes = predict.shapes_of(scale)
    lines = [f"scale lab: {path}", f"  device {scale['device']}, torch {scale['torch']}, {scale['date'][:10]}",
             f"  {len(scale['rows'])} engine cells in {scale['wall_s']} s; shapes: {', '.join(shapes)}"]
    missing = [s for s in scale["grid"]["shapes"] if s not in shapes]
    if missing:
        lines.append(f"  not reached within its time budget ({scale['grid']['time_budget_s']:.0f} s): "
                     f"{', '.join(missing)} ({len(scale['skipped'])} cells)")
    if scale["errors"]:
        lines.append(f"  errors: {scale['errors']}")
    if scale["grid"]["tiny"]:
        lines.append("  these are the CPU rehearsal's tiny shapes (hidden 64): they exercise the code, and their "
                     "milliseconds say nothing about a GPU")
    return "\n".join(lines)


def step_table(scale: Mapping, k: int, concurrency: int, depth: int = predict.PEAGLE_DEPTH) -> str:
    """verify / drafting / whole step (ms) per shape and method at K and c."""
    lines = [f"one decode step at K = {k}, c = {concurrency} (ms; P-EAGLE drafter {depth} layers)",
             f"{'shape':<22}{'verify':>8}{'E3 draft':>10}{'E3 step':>9}{'P draft':>9}{'P step':>8}{'E3/P':>7}"]
    for shape in predict.shapes_of(scale):
        if concurrency not in predict.concurrencies_of(scale, shape) or depth not in predict.depths_of(scale, shape):
            continue
        e, p = (predict.step_costs(scale, shape, m, k, concurrency, depth) for m in METHODS)
        lines.append(f"{shape:<22}{e['verify_ms']:>8.3f}{e['draft_ms']:>10.3f}{e['step_ms']:>9.3f}"
                     f"{p['draft_ms']:>9.3f}{p['step_ms']:>8.3f}{e['step_ms'] / p['step_ms']:>7.2f}")
    return "\n".join(lines)


def layer_and_moe_text(scale: Mapping) -> str:
    """The per-layer rule checked where a shape ran whole, and the MoE layer beside its dense stand-in."""
    check = scale["layer_check"]
    lines = []
    if check:
        worst = max(check, key=lambda c: abs(c["error"]))
        lines.append(f"per-layer rule on {worst['shape']} ({len(check)} cells): the verify time scaled from 2 and 4 "
                     f"layers differs from the whole model's by {abs(worst['error']):.1%} at most (K = {worst['k']}, "
                     f"c = {worst['concurrency']})")
    for name, rows in (scale.get("moe") or {}).items():
        if isinstance(rows, str):
            lines.append(f"{name}: no MoE layer measured ({rows})")
            continue
        by, info = {r["tokens"]: r for r in rows}, scale["shapes"][name]
        e, k = info["experts"], info["top_k"]
        for t in (1, 8) if 8 in by else (min(by),):
            r = by[t]
            touched = e * (1 - (1 - k / e) ** t)
            lines.append(f"{name}, {t} token(s) in one layer (about {touched:.0f} of {e} experts read): routed "
                         f"experts {r['moe_ms']:.3f} ms, dense stand-in of {k} experts {r['dense_ms']:.3f} ms")
    return "\n".join(lines)


def check_table(cells: Sequence[Mapping], tolerance: float = 0.10) -> str:
    """Predicted against measured decode throughput, one row per (workload, method, c), the error per K, and
    the verdict (error = predicted / measured − 1)."""
    ks = sorted({c["k"] for c in cells})
    lines = ["error of the predicted decode tokens/s against the measured, per K",
             f"{'workload':<9}{'method':<9}{'c':>3}" + "".join(f"{'K=' + str(k):>8}" for k in ks)]
    for key in sorted({(c["workload"], c["method"], c["concurrency"]) for c in cells}):
        err = {c["k"]: c["error"] for c in cells if (c["workload"], c["method"], c["concurrency"]) == key}
        lines.append(f"{key[0]:<9}{NAMES[key[1]]:<9}{key[2]:>3}"
                     + "".join(f"{err[k]:>+8.1%}" if k in err else f"{'—':>8}" for k in ks))
    s = predict.check_summary(cells, tolerance)
    verdict = "every cell" if s["all_within"] else f"{s['within']} of {s['cells']} cells"
    lines.append(f"within {tolerance:.0%}: {verdict}; largest error {s['max_abs_error']:.1%}")
    if cells:
        step = max(abs(c["predicted_step_ms"] / c["measured_step_ms"] - 1) for c in cells)
        al = max(abs(c["predicted_al"] / c["measured_al"] - 1) for c in cells)
        lines.append(f"its two parts: step time off by {step:.1%} at most, acceptance length by {al:.1%} at most")
    return "\n".join(lines)


def speedup_text(tables: Mapping[str, Sequence[Mapping]]) -> str:
    """Predicted P-EAGLE ÷ EAGLE-3 per c for each acceptance source, beside the paper's SPEED-Bench figure."""
    names = list(tables)
    cs = sorted({r["concurrency"] for rows in tables.values() for r in rows})
    lines = ["P-EAGLE ÷ EAGLE-3, each at its best K (predicted; K of P-EAGLE/EAGLE-3 in brackets)",
             f"{'c':>4}{'paper':>8}" + "".join(f"{n:>24}" for n in names)]
    for c in cs:
        cells = []
        for n in names:
            r = next((r for r in tables[n] if r["concurrency"] == c), None)
            cells.append("—" if r is None else f"{r['ratio']:.2f}x ({r['peagle_k']}/{r['eagle3_k']})")
        paper = SPEED_BENCH_SPEEDUP.get(c)
        lines.append(f"{c:>4}{'—' if paper is None else f'{paper:.2f}x':>8}" + "".join(f"{x:>24}" for x in cells))
    return "\n".join(lines)


def _ratio(scale, shape, c, acc, depth=predict.PEAGLE_DEPTH) -> float:
    return next(r["ratio"] for r in predict.speedup_table(scale, shape, acc, depth) if r["concurrency"] == c)


def distance_report(scale: Mapping, shape: str = "gpt-oss-20b", concurrency: int = 1) -> str:
    """The predicted P/E at the paper's model with the paper's SPEED-Bench acceptance, against its 1.69x, and
    the three things that move it: the benchmark's acceptance, routed experts, and EAGLE-3's drafting cost."""
    paper = SPEED_BENCH_SPEEDUP[concurrency]
    speed = predict.paper_acceptance("SPEED-Bench")
    base = _ratio(scale, shape, concurrency, speed)
    lines = [f"{shape} shape, c = {concurrency}, the paper's SPEED-Bench acceptance: predicted P/E {base:.2f}x; "
             f"the paper measures {paper:.2f}x on a B200 (predicted / measured = {base / paper:.2f})"]
    he = _ratio(scale, shape, concurrency, predict.paper_acceptance("HumanEval"))
    lines.append(f"  with its HumanEval acceptance instead: {he:.2f}x")
    if f"{shape}+moe" in predict.shapes_of(scale):
        moe = _ratio(scale, f"{shape}+moe", concurrency, speed)
        lines.append(f"  with routed experts in every layer (K + 1 verify tokens read more experts than one): "
                     f"{moe:.2f}x")
    factor = predict.drafting_cost_to_match(scale, shape, concurrency, speed, paper)
    lines.append("  no factor on EAGLE-3's drafting time in [0.05, 50] reaches the paper's figure" if factor is None
                 else f"  EAGLE-3's drafter passes would have to cost {factor:.2f}x what they cost in this engine "
                      f"(relative to the target) for the prediction to reach {paper:.2f}x")
    return "\n".join(lines)


def baseline_text(bench: Mapping, workloads: Sequence[str] | None = None) -> str:
    """EAGLE-3's and P-EAGLE's AL gain from K = 3 to 7: ours per workload (default: every one the sweep has)
    beside the paper's (HumanEval)."""
    workloads = list(workloads or predict.workloads_of(bench))
    lines = []
    for wl in workloads:
        s = predict.baseline_strength(bench, wl)
        for m in METHODS:
            if f"ours_{m}" in s:
                o = s[f"ours_{m}"]
                lines.append(f"ours, {wl:<5} {NAMES[m]:<8} AL(3) {o['al3']:.2f}  AL(7) {o['al7']:.2f}  gain {o['gain']:+.2f}")
    paper = predict.baseline_strength(bench, workloads[0])
    for m in METHODS:
        p = paper[f"paper_{m}"]
        lines.append(f"paper, HumanEval {NAMES[m]:<8} AL(3) {p['al3']:.2f}  AL(7) {p['al7']:.2f}  gain {p['gain']:+.2f}")
    lead = paper["paper_peagle"]["al7"] / paper["paper_eagle3"]["al7"]
    lines.append(f"P-EAGLE's AL over EAGLE-3's at K = 7: the paper {lead:.2f}x (HumanEval)")
    for wl in workloads:
        s = predict.baseline_strength(bench, wl)
        if "ours_eagle3" in s and "ours_peagle" in s:
            gain, pg = s["ours_eagle3"]["gain"], paper["paper_eagle3"]["gain"]
            lines.append(f"  ours on {wl}: {s['ours_peagle']['al7'] / s['ours_eagle3']['al7']:.2f}x; our EAGLE-3 gains "
                         f"{'more' if gain > pg else 'less'} from K = 3 to 7 than the paper's ({gain:+.2f} vs {pg:+.2f})")
    return "\n".join(lines)


def acceptance_vs_shape(scale: Mapping, sources: Mapping[str, Mapping], concurrency: int = 1,
                        depth: int = predict.PEAGLE_DEPTH) -> str:
    """Predicted P/E at c for every shape (rows) and acceptance source (columns): which moves it more?"""
    names = list(sources)
    lines = [f"predicted P-EAGLE ÷ EAGLE-3 at c = {concurrency}, P-EAGLE drafter {depth} layers",
             f"{'shape':<22}" + "".join(f"{n:>22}" for n in names)]
    for shape in predict.shapes_of(scale):
        if concurrency in predict.concurrencies_of(scale, shape) and depth in predict.depths_of(scale, shape):
            lines.append(f"{shape:<22}" + "".join(f"{_ratio(scale, shape, concurrency, sources[n], depth):>21.2f}x"
                                                  for n in names))
    return "\n".join(lines)

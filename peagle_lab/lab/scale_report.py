"""Notebook 8's printed tables: the scale lab's step costs, the check against our sweep, the predicted
speed-ups beside the paper's, and what the rest of the distance to the paper's speed-up would take.

Every function returns text computed from the committed JSON (``predict.load_scale``, a K sweep's
``bench.json``); the notebook prints it, so no figure on the page is typed by hand.
"""
from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..bench.archive import run_folders
from ..bench.scale_costs import carried_to, expert_bound_moe, prompt_range, short_rows, step_context
from ..hardware import bandwidth_ratio, preset_of
from ..provenance import REPO
from . import predict
from .kmodel import METHODS
from .paper import SPEED_BENCH_SPEEDUP

__all__ = ["scale_summary", "step_table", "layer_and_moe_text", "check_table", "occupancy_text", "continuous_check_text",
           "context_text", "ragged_attention", "ragged_attention_text", "splits_text", "speedup_text",
           "distance_numbers", "distance_report", "baseline_text", "acceptance_vs_shape"]

NAMES = {"eagle3": "EAGLE-3", "peagle": "P-EAGLE"}


def scale_summary(scale: Mapping, path: str) -> str:
    """Where the scale lab's numbers come from, and what it measured."""
    shapes = predict.shapes_of(scale)
    files = path.split(" + ")
    lines = [f"scale lab: {files[0]}", *(f"  + {f}" for f in files[1:]),
             f"  device {scale['device']}, torch {scale['torch']}, {scale['date'][:10]}",
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
    short = [c for c in cells if c["rows"] < (1 - tolerance) * c["concurrency"]]
    for conc in sorted({c["concurrency"] for c in short}):
        at = [c for c in short if c["concurrency"] == conc]
        lines.append(f"{len(at)} cells at c = {conc} kept {min(c['rows'] for c in at):.1f}-{max(c['rows'] for c in at):.1f} "
                     f"rows busy on average, each predicted at its rows; with all {conc} busy, as the scale lab runs, "
                     f"their errors would be {min(c['full_rows_error'] for c in at):+.1%} to "
                     f"{max(c['full_rows_error'] for c in at):+.1%}")
    if cells:
        step = max(abs(c["predicted_step_ms"] / c["measured_step_ms"] - 1) for c in cells)
        al = max(abs(c["predicted_al"] / c["measured_al"] - 1) for c in cells)
        lines.append(f"its two parts: step time off by {step:.1%} at most, acceptance length by {al:.1%} at most")
    return "\n".join(lines)


def occupancy_text(bench: Mapping, scale: Mapping) -> str:
    """How full a sweep's batches at c > 1 ran, and how long its contexts were, beside the scale lab's.

    A static batch decodes until its longest answer ends: plain decoding keeps every row stepping
    (``row_steps`` = c · steps), speculative cells drop finished rows, so their steps run fewer.
    """
    info = (bench.get("config") or {}).get("prompts") or {}
    grid = scale["grid"]
    ours = grid["prompt_tokens"] + grid["new_tokens"] / 2 if "prompt_tokens" in grid else None
    lines = [f"the scale lab: every row busy, {grid.get('prompt_tokens', '?')}-token prompts, "
             f"{grid.get('new_tokens', '?')} new tokens a request"
             + (f" (a step's context: {ours:.0f} tokens on average)" if ours else "")]
    rows = [r for r in bench["rows"] if r["concurrency"] > 1 and r["temperature"] == 0 and r.get("row_steps")]
    for wl, c in sorted({(r["workload"], r["concurrency"]) for r in rows}):
        at = [r for r in rows if (r["workload"], r["concurrency"]) == (wl, c)]
        spec = [predict.busy_rows(r) for r in at if r["method"] in METHODS]
        kind = "continuous batching" if any(r.get("continuous") for r in at) else f"static batches of {c}"
        lines.append(f"{wl}, c = {c}, {kind}: speculative cells keep {min(spec):.1f}-{max(spec):.1f} rows busy on "
                     f"average" if spec else f"{wl}, c = {c}, {kind}")
        counted = [r["output_tokens"] / r["num_prompts"] for r in at if r.get("output_tokens") and r.get("num_prompts")]
        answer = sum(counted) / len(counted) if counted else None  # greedy: one text whatever the method
        for r in (r for r in at if r["method"] == "baseline"):
            answer = r["output_tokens"] / r["num_prompts"]
            lines.append(f"  plain decoding: {r['num_steps']} steps x {predict.busy_rows(r):.0f} rows = "
                         f"{r['row_steps']:,} row-steps for {r['output_tokens']:,} tokens "
                         f"({r['output_tokens'] / r['row_steps']:.0%} of them useful); answers average {answer:.0f} tokens")
        if wl in info:
            mean = info[wl]["mean_tokens"]
            context = "" if answer is None or not ours else \
                f"; a step's context about {mean + answer / 2:.0f} tokens, {(mean + answer / 2) / ours:.1f}x the scale lab's"
            lines.append(f"  prompts average {mean:.0f} tokens (up to {info[wl]['max_tokens']}){context}")
    return "\n".join(lines)


def continuous_check_text(scale: Mapping) -> str:
    """The check against the newest continuous-batching answer-length sweep (rows refilled as requests end,
    so every c keeps its rows busy, as the scale lab does), or a line saying none is committed."""
    try:
        doc, path = predict.answer_sweep(continuous=True)
    except ValueError as e:
        return f"{e}: the check above is against static batches alone"
    cells = predict.check_against_bench(scale, doc)
    return "\n".join([f"continuous batching: {path} ({doc['run_info']['device']}, {doc['run_info']['date'][:10]})",
                      check_table(cells), context_text(scale, cells)])


def context_text(scale: Mapping, cells: Sequence[Mapping]) -> str:
    """The contexts the check's cells attend to beside the scale-lab runs their steps are read between: uniform
    runs (every request one prompt length) and, where committed, ragged ones (prompts drawn from a range)."""
    measured = ", ".join(f"{step_context(r):.0f}" for r in predict.context_runs(scale))
    lines = [f"the scale lab's uniform runs: steps attending to {measured} tokens; each cell's step is read at its "
             f"own context, linear between the two runs around it (the nearest run past either end)"]
    ragged = predict.ragged_runs(scale)
    if ragged:
        ranges = ", ".join("{}-{}".format(*prompt_range(r)) + (f" ({n} of one token)" if (n := short_rows(r)) else "")
                           for r in ragged)
        used = sum(x.get("step_runs") == "ragged" for x in cells)
        lines.append(f"ragged runs (prompts drawn from {ranges} tokens): {used} of {len(cells)} cells, those with more "
                     f"than one busy row, read their step there")
    if fit := sum(x.get("step_runs") == "fit" for x in cells):
        fewer = sum(x.get("step_runs") == "fit" and x.get("rows", x["concurrency"]) < x["concurrency"]
                    for x in cells)
        lines.append(f"{fit} of {len(cells)} cells, at c > 1 with the mean and longest context of every row their steps "
                     "ran recorded (an idle row at 1), read their step from the fit of every run at their c"
                     + (f"; {fewer} of them, static batches of fewer rows a step, linear in rows from the uniform "
                        "runs' step toward it" if fewer else ""))
    for wl, c in sorted({(x["workload"], x["concurrency"]) for x in cells if x.get("context") is not None}):
        ctx = [x["context"] for x in cells if (x["workload"], x["concurrency"]) == (wl, c) and x.get("context")]
        top = [x["longest_context"] for x in cells if (x["workload"], x["concurrency"]) == (wl, c)
               and x.get("longest_context")]
        busy = [100 * x["busy_share"] for x in cells if (x["workload"], x["concurrency"]) == (wl, c)
                and x.get("busy_share") is not None and x.get("step_runs") == "fit"]
        lines.append(f"  {wl}, c = {c}: steps attend to {min(ctx):.0f}-{max(ctx):.0f} tokens on average over busy rows"
                     + (f"; the longest row {min(top):.0f}-{max(top):.0f}" if top else "")
                     + (f"; busy rows {min(busy):.0f}-{max(busy):.0f} % of the rows a step runs" if busy else ""))
    return "\n".join(lines)


RAGGED_FILE = "decode_attention_ragged.json"  # scripts/gpu/decode_attention_gpu.py on ragged and uniform contexts
SPLITS_FILE = "decode_attention_splits.json"  # the same with --variants splits=2 splits=4 (headline_session.sh)
_VARIANT = re.compile(r"triton\[(.+)\]_us")  # a row's forced setting, e.g. "triton[splits=4]_us"


def _shapes_of(command: str) -> list[tuple[int, int]]:
    """(shortest, longest) of each ``--shapes c,T,S,shortest,longest`` of a decode_attention_gpu.py command."""
    words, out = shlex.split(command), []
    for w in words[words.index("--shapes") + 1:] if "--shapes" in words else []:
        if w.startswith("--"):
            break
        parts = [int(x) for x in w.split(",")]
        out.append((parts[3], parts[4]) if len(parts) == 5 else (0, 0))
    return out


def ragged_attention(path: str | Path | None = None, file: str = RAGGED_FILE) -> tuple[list[dict], str]:
    """(the decode-attention kernel's rows with each one's context range, the file): ``path``, else the newest
    committed ``file`` (``RAGGED_FILE``, or ``SPLITS_FILE`` for the kernel at forced split counts). Rows:
    ``{"c", "T", "shortest", "longest", "mean", "us", "variants"}``; ``variants`` maps a forced setting
    (``"splits=4"``) to its µs a call, where the run timed any.

    Raises:
        ValueError: none is committed.
    """
    if path is None:
        found = [r.path / file for r in run_folders(topic="decode_attention") if (r.path / file).is_file()]
        if not found:
            raise ValueError(f"no {file} in any decode_attention run folder")
        path = max(found, key=lambda p: json.loads(p.read_text())["date"])
    doc = json.loads(Path(path).read_text())
    ranges = _shapes_of(doc["command"])
    rows = []
    for i, r in enumerate(doc["attention"]):
        lo, hi = (r["shortest"], r["longest"]) if "shortest" in r else ranges[i]
        variants = {m.group(1): v for k, v in r.items() if (m := _VARIANT.fullmatch(k))}
        rows.append({"c": r["c"], "T": r["T"], "shortest": lo, "longest": hi, "mean": r["kv_len_mean"],
                     "us": r["triton_us"], "variants": variants})
    path = Path(path).resolve()
    return rows, str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


def splits_text(rows: Sequence[Mapping]) -> str:
    """Each batch's attention call at the kernel's own split count beside the forced ones: µs a call and how many
    times faster (above 1) or slower (below 1) than its own choice."""
    lines = ["decode attention, µs a call (one layer; 30 calls in one CUDA graph): the kernel's own KV splits beside "
             "forced ones (x: how many times faster than its own)"]
    for r in rows:
        kind = (f"contexts {r['shortest']}-{r['longest']} (mean {r['mean']:.0f})" if r["shortest"] < r["longest"]
                else f"uniform {r['mean']:.0f}")
        forced = "; ".join(f"{name} {us:.1f} ({r['us'] / us:.2f}x)" for name, us in r["variants"].items())
        lines.append(f"c = {r['c']}, {r['T']} query token(s), {kind}: own {r['us']:.1f}; {forced}")
    return "\n".join(lines)


def ragged_attention_text(rows: Sequence[Mapping]) -> str:
    """Each ragged batch's attention call beside a uniform one of about its mean context and one of its longest."""
    lines = ["decode attention, µs a call (one layer; 30 calls in one CUDA graph): a ragged batch beside uniform ones"]
    uniform = [r for r in rows if r["shortest"] == r["longest"]]
    for r in (r for r in rows if r["shortest"] < r["longest"]):
        same = [u for u in uniform if (u["c"], u["T"]) == (r["c"], r["T"])]
        if not same:
            continue
        near = min(same, key=lambda u: abs(u["mean"] - r["mean"]))
        text = (f"c = {r['c']}, {r['T']} query token(s): contexts {r['shortest']}-{r['longest']} (mean {r['mean']:.0f}) "
                f"{r['us']:.1f}; uniform {near['mean']:.0f}: {near['us']:.1f} ({r['us'] / near['us']:.2f}x)")
        top = next((u for u in same if u["mean"] == r["longest"]), None)
        lines.append(text + (f"; uniform {top['mean']:.0f}: {top['us']:.1f}" if top else ""))
    return "\n".join(lines)


def speedup_text(tables: Mapping[str, Sequence[Mapping]]) -> str:
    """Predicted P-EAGLE ÷ EAGLE-3 per c for each acceptance source, beside the paper's measured figure on
    SPEED-Bench (``SPEED_BENCH_SPEEDUP``; the README and notebook 5 quote its MT-Bench and HumanEval figures)."""
    names = list(tables)
    cs = sorted({r["concurrency"] for rows in tables.values() for r in rows})
    paper_head = "paper, SPEED-Bench (measured)"
    lines = ["P-EAGLE ÷ EAGLE-3, each at its best K: the paper's measured figure, then predicted from each "
             "acceptance (K of P-EAGLE/EAGLE-3 in brackets)",
             f"{'c':>4}{paper_head:>31}" + "".join(f"{n:>24}" for n in names)]
    for c in cs:
        cells = []
        for n in names:
            r = next((r for r in tables[n] if r["concurrency"] == c), None)
            cells.append("—" if r is None else f"{r['ratio']:.2f}x ({r['peagle_k']}/{r['eagle3_k']})")
        paper = SPEED_BENCH_SPEEDUP.get(c)
        lines.append(f"{c:>4}{'—' if paper is None else f'{paper:.2f}x':>31}" + "".join(f"{x:>24}" for x in cells))
    return "\n".join(lines)


def _best(scale, shape, c, acc, depth=predict.PEAGLE_DEPTH) -> dict:
    return next(r for r in predict.speedup_table(scale, shape, acc, depth) if r["concurrency"] == c)


def _ratio(scale, shape, c, acc, depth=predict.PEAGLE_DEPTH) -> float:
    return _best(scale, shape, c, acc, depth)["ratio"]


def distance_numbers(scale: Mapping, shape: str = "gpt-oss-20b", concurrency: int = 1,
                     device: str = "B200") -> dict:
    """The predicted P/E at ``shape`` and c with the paper's SPEED-Bench acceptance, and each lever on it.

    Per variant (``"dense"``: the 4-expert stand-in; ``"routed"``: the real MoE layer in every layer, where
    measured): ``best`` (speedup_table's row), ``humaneval`` (the ratio with the paper's HumanEval
    acceptance), ``verify`` ({K: verify ms} at K = 1 and 8), ``drafting`` (the factor on EAGLE-3's drafter
    time that reaches the paper's figure, or None), ``device_verify`` / ``device_all`` (the ratio with the
    costs carried to ``device``: the verify pass alone, or every GPU part), ``device_drafting`` (the factor
    on that projection); ``routed`` also ``expert_bound`` (the ratio with an MoE layer that costs only the
    experts it reads). Where the scale lab's device is no GPU preset (the CPU rehearsal) ``device`` is None
    and the device keys are absent.
    """
    speed, paper = predict.paper_acceptance("SPEED-Bench"), SPEED_BENCH_SPEEDUP[concurrency]
    variants = {"dense": shape, "routed": f"{shape}+moe"}
    variants = {v: s_ for v, s_ in variants.items() if s_ in predict.shapes_of(scale)}
    carry = preset_of(scale["device"]) is not None  # a CPU rehearsal has no bandwidth to scale by
    verify_only, every_part = (carried_to(scale, device, drafter=False), carried_to(scale, device)) if carry else (None, None)
    out = {"shape": shape, "concurrency": concurrency, "paper": paper, "device": device if carry else None,
           "measured_on": scale["device"]}
    for v, s_ in variants.items():
        out[v] = {"best": _best(scale, s_, concurrency, speed),
                  "humaneval": _ratio(scale, s_, concurrency, predict.paper_acceptance("HumanEval")),
                  "verify": {k: predict.step_costs(scale, s_, "eagle3", k, concurrency)["verify_ms"] for k in (1, 8)},
                  "drafting": predict.drafting_cost_to_match(scale, s_, concurrency, speed, paper)}
        if carry:
            out[v].update(device_verify=_ratio(verify_only, s_, concurrency, speed),
                          device_all=_ratio(every_part, s_, concurrency, speed),
                          device_drafting=predict.drafting_cost_to_match(verify_only, s_, concurrency, speed, paper))
    if "routed" in out:
        out["routed"]["expert_bound"] = _ratio(expert_bound_moe(scale), variants["routed"], concurrency, speed)
    return out


def _factor(x: float | None) -> str:
    return "no factor in [0.05, 50]" if x is None else f"{x:.2f}x"


def distance_report(scale: Mapping, shape: str = "gpt-oss-20b", concurrency: int = 1) -> str:
    """The predicted P/E at the paper's model with the paper's SPEED-Bench acceptance, against its measured
    speed-up, for the dense stand-in and the routed experts, and what the rest of the distance would take:
    the verify pass's growth with K, EAGLE-3's drafting cost, and the paper's GPU (:func:`distance_numbers`)."""
    n = distance_numbers(scale, shape, concurrency)
    info = scale["shapes"].get(shape, {})
    names = {"dense": "dense stand-in (the active experts' MLP)",
             "routed": f"routed experts in every layer ({info.get('experts')}, top-{info.get('top_k')})"}
    lines = [f"{shape} shape, c = {concurrency}, the paper's SPEED-Bench acceptance; the paper measures "
             f"{n['paper']:.2f}x on a B200"]
    for v in ("dense", "routed"):
        if v in n:
            b = n[v]["best"]
            lines.append(f"  {names[v]}: predicted P/E {b['ratio']:.2f}x (P-EAGLE K = {b['peagle_k']}, EAGLE-3 "
                         f"K = {b['eagle3_k']}; predicted / measured = {b['ratio'] / n['paper']:.2f}); with its "
                         f"HumanEval acceptance {n[v]['humaneval']:.2f}x")
    lines.append("what the rest of the distance would take:")
    for v in ("dense", "routed"):
        if v in n:
            lo, hi = n[v]["verify"][1], n[v]["verify"][8]
            lines.append(f"  {v}: verify of K + 1 tokens {lo:.2f} ms at K = 1, {hi:.2f} ms at K = 8 ({hi / lo:.2f}x): "
                         f"each draft token past the first adds {round((hi - lo) / 7, 3) or 0.0:.3f} ms to every step")
    if "routed" in n:
        lines.append(f"  routed experts costing only the experts they read (the layer's fixed overhead gone, "
                     f"the growth with K kept): {n['routed']['expert_bound']:.2f}x")
    for v in ("dense", "routed"):
        if v in n:
            lines.append(f"  {v}: EAGLE-3's drafter passes would have to cost {_factor(n[v]['drafting'])} what they "
                         f"cost in this engine (relative to the target) to reach {n['paper']:.2f}x")
    if n["device"] is None:
        lines.append(f"  another GPU: {n['measured_on']} is no GPU preset, so there is no bandwidth to carry its costs by")
        return "\n".join(lines)
    ratio = 1.0 / bandwidth_ratio(preset_of(n["measured_on"]), n["device"])
    lines.append(f"  a {n['device']} ({ratio:.2f}x the memory bandwidth; a projection, no {n['device']} ran this):")
    for v in ("dense", "routed"):
        if v in n:
            lines.append(f"    {v}: verify faster by the bandwidth, drafter passes as measured "
                         f"{n[v]['device_verify']:.2f}x; every GPU part faster {n[v]['device_all']:.2f}x; there, "
                         f"EAGLE-3's drafting would have to cost {_factor(n[v]['device_drafting'])}")
    return "\n".join(lines)


def baseline_text(bench: Mapping, workloads: Sequence[str] | None = None, concurrency: int = 1) -> str:
    """EAGLE-3's and P-EAGLE's AL gain from K = 3 to 7: ours per workload (default: every one the sweep has), read
    from the sweep's measured cells at K = 3 and K = 7 and ``concurrency`` (``predict.baseline_strength``, the cells
    docs/paper.md's rows read), beside the paper's (HumanEval)."""
    workloads = list(workloads or predict.workloads_of(bench))
    strength = {wl: predict.baseline_strength(bench, wl, concurrency) for wl in workloads}
    lines = [f"ours: the measured cells at K = 3 and K = 7, c = {concurrency}, of each workload (the cells "
             "docs/paper.md reads); the paper: its HumanEval AL tables"]
    for wl, s in strength.items():
        for m in METHODS:
            if f"ours_{m}" in s:
                o = s[f"ours_{m}"]
                lines.append(f"{'ours, ' + wl:<17} {NAMES[m]:<8} AL(3) {o['al3']:.2f}  AL(7) {o['al7']:.2f}  gain {o['gain']:+.2f}")
    paper = strength[workloads[0]]
    for m in METHODS:
        p = paper[f"paper_{m}"]
        lines.append(f"{'paper, HumanEval':<17} {NAMES[m]:<8} AL(3) {p['al3']:.2f}  AL(7) {p['al7']:.2f}  gain {p['gain']:+.2f}")
    lead = paper["paper_peagle"]["al7"] / paper["paper_eagle3"]["al7"]
    lines.append(f"P-EAGLE's AL over EAGLE-3's at K = 7: the paper {lead:.2f}x (HumanEval)")
    for wl, s in strength.items():
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

"""Predict and check: throughput from step costs and acceptance, at any target shape the scale lab measured.

One decode step yields AL(K) tokens a request and costs ``step(K, c)``, so at concurrency c::

    TPS(K, c) = 1000 · c · AL(K) / step_ms(K, c)

``step_ms`` comes from the scale lab (:mod:`peagle_lab.bench.scale`: this engine's verify, prep,
drafter passes and host time with random weights at a target's shape); AL(K) = 1 + Σ_{i ≤ K} a_i
from one of three acceptance sources:

(a) **our heads**, measured: the per-position acceptance a_i of a K sweep's largest-K rows, per
    workload and method (:func:`measured_acceptance`, pooled over concurrencies);
(b) **the paper's**, a preset: the blog publishes HumanEval ALs at K = 3 and K = 7 for both
    methods (``paper.HUMANEVAL_AL``). Two ALs fix the two parameters of the K-model's geometric
    acceptance (:class:`~peagle_lab.lab.kmodel.Acceptance`): a_1, the first position's rate, and r,
    the conditional rate of every later position (a_{i+1} = r · a_i). :func:`fit_geometric`
    solves AL(3) and AL(7) for them exactly;
(c) **sliders**: any ``Acceptance(first, decay)``.

Each method is taken at its best K (1–8) and P-EAGLE / EAGLE-3 is the ratio of the two best
throughputs (:func:`speedup_table`), printed beside the paper's per-concurrency speed-ups.

The check (:func:`check_against_bench`): with (a) and the SmolLM2 step costs, the model predicts
every cell of our measured sweep; it is right where each prediction lies within 10 % of the
cell's measured decode throughput, 1000 · rows · AL / step_ms at the rows its steps kept busy (c where
every row stays busy, as in the scale lab and a continuous batch; fewer in a static batch of answers to
EOS, whose requests finish at different steps) and at the context its steps attend to (:func:`row_context`;
the step interpolated between scale-lab runs at several prompt lengths, where they are committed), from runs
whose requests differ in prompt length (ragged, as a real batch is) where those are committed and the cell kept
more than one row busy. Finding and merging the committed runs: :mod:`peagle_lab.lab.scale_runs`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ..bench import archive
from ..bench.scale_costs import (carried_to, has_costs, step_costs, step_costs_at_context, step_costs_at_rows,
                                 short_rows, step_costs_fit, step_costs_ragged, step_costs_toward)
from ..provenance import REPO
from .kmodel import METHODS, Acceptance, acceptance_length, measured_decode_tps
from .paper import HUMANEVAL_AL, PAPER_AL, SPEED_BENCH_SPEEDUP
from .paper_data import measured_al
from .scale_runs import (CPU_SCALE, SCALE_FILE, SCALE_TOPIC, attention_tile, context_runs, fit_runs, load_scale,
                         merge_scale, ragged_runs, scale_files)

__all__ = ["fit_geometric", "paper_acceptance", "measured_acceptance", "al_at", "predicted_tps", "best_k",
           "speedup_table", "check_against_bench", "check_summary", "baseline_strength", "load_scale",
           "tps_curves", "step_split", "usable_ks", "workloads_of", "code_workload", "drafting_cost_to_match", "shapes_of", "concurrencies_of", "depths_of",
           "SCALE_TOPIC", "SCALE_FILE", "CPU_SCALE", "scale_files", "merge_scale",
           "ANSWER_TOPIC", "ANSWER_FILE", "answer_sweep", "busy_rows", "row_context", "fit_contexts", "context_runs", "ragged_runs", "PEAGLE_DEPTH", "KS"]

KS = tuple(range(1, 9))
PEAGLE_DEPTH = 4  # the shipped P-EAGLE head's layers (and the paper's GPT-OSS 20B drafter's)
# answers decoded to EOS, the shipped heads: the bench.json of a docs/results/<device>/answer_length/ run folder
ANSWER_TOPIC = "answer_length"
ANSWER_FILE = "bench.json"


def answer_sweep(continuous: bool = False, concurrencies: Sequence[int] | None = None) -> tuple[dict, str]:
    """(the newest answer-length sweep by its run_info date, its path relative to the repository): real answers to
    EOS, the paper's protocol; the ``ANSWER_FILE`` of a run folder of ``ANSWER_TOPIC`` on any device.

    Args:
        continuous: False, the newest whose cells at c > 1 ran as static batches (``config.continuous`` 0);
            True, the newest that batched them continuously (rows refilled as requests finish).
        concurrencies: the concurrencies the sweep must have measured (``config.concurrencies``); None, the
            whole grid of its kind: c = 1 and 64 for static batches, c = 64 for continuous batching. ``(1,)``
            takes the newest c = 1 answers, a sweep of that column alone included.

    Raises:
        ValueError: none of that kind is committed.
    """
    want = set(concurrencies or ((64,) if continuous else (1, 64)))
    runs = archive.run_folders(topic=ANSWER_TOPIC, root=REPO / archive.RESULTS_DIR)
    sweeps = [(json.loads(p.read_text()), p) for run in runs if (p := run.path / ANSWER_FILE).is_file()]
    found = [(d, p) for d, p in sweeps if bool((d.get("config") or {}).get("continuous")) == continuous
             and want <= set((d.get("config") or {}).get("concurrencies") or ())]
    if not found:
        kind = "continuous-batching" if continuous else "static-batch"
        raise ValueError(f"no {kind} answer-length sweep at c = {', '.join(map(str, sorted(want)))} among the "
                         f"{len(sweeps)} committed under {REPO} "
                         f"({archive.RESULTS_DIR}/<device>/{ANSWER_TOPIC}/<date>-<commit>/{ANSWER_FILE})")
    doc, path = max(found, key=lambda dp: (dp[0].get("run_info") or {}).get("date", ""))
    return doc, str(path.relative_to(REPO))


# ------------------------------------------------------------------ acceptance
def _geometric_sum(r: float, k: int) -> float:
    """1 + r + … + r^(K−1): AL(K) − 1 of a first-position rate of 1 (the K-model's sum, not a second one)."""
    return acceptance_length(Acceptance(1.0, r), k) - 1.0


def fit_geometric(al3: float, al7: float) -> Acceptance:
    """The geometric acceptance (a_1, r) whose AL(3) and AL(7) are ``al3`` and ``al7``.

    AL(K) − 1 = a_1 · (1 + r + … + r^(K−1)), so (AL(7) − 1) / (AL(3) − 1) depends on r alone and
    grows from 1 (r = 0) to 7/3 (r = 1): bisection finds r, then a_1 = (AL(3) − 1) / (1 + r + r²).

    >>> a = fit_geometric(2.65, 3.03)  # the paper's EAGLE-3 on HumanEval
    >>> round(a.first, 3), round(a.decay, 3)
    (0.849, 0.593)
    >>> fit_geometric(2.0, 1.5)
    Traceback (most recent call last):
    ValueError: AL(3)=2.0, AL(7)=1.5: expected 1 < AL(3) <= AL(7) <= 1 + 7/3 · (AL(3) − 1)
    """
    ratio = (al7 - 1.0) / (al3 - 1.0) if al3 > 1.0 else -1.0
    if not 1.0 <= ratio <= 7.0 / 3.0:
        raise ValueError(f"AL(3)={al3}, AL(7)={al7}: expected 1 < AL(3) <= AL(7) <= 1 + 7/3 · (AL(3) − 1)")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _geometric_sum(mid, 7) / _geometric_sum(mid, 3) < ratio else (lo, mid)
    r = (lo + hi) / 2
    first = (al3 - 1.0) / _geometric_sum(r, 3)
    if first > 1.0:
        raise ValueError(f"AL(3)={al3}, AL(7)={al7} need a first-position rate {first:.3f} > 1")
    return Acceptance(first, r)


def paper_acceptance(benchmark: str = "HumanEval") -> dict[str, Acceptance]:
    """(b): each method's geometric acceptance fitted to the paper's AL(3) and AL(7) on ``benchmark``
    (HumanEval, SPEED-Bench or MT-Bench: ``paper.PAPER_AL``)."""
    if benchmark not in PAPER_AL:
        raise ValueError(f"benchmark={benchmark!r}; the paper publishes ALs for {', '.join(PAPER_AL)}")
    al = PAPER_AL[benchmark]
    return {m: fit_geometric(al[(m, 3)], al[(m, 7)]) for m in METHODS}


def measured_acceptance(bench: Mapping, workload: str) -> dict[str, tuple[float, ...]]:
    """(a): per method, the per-position acceptance a_1 … a_K of the sweep's largest K at temperature 0,
    pooled over concurrencies (weighted by drafts).

    Raises:
        ValueError: the sweep has no EAGLE-3 or P-EAGLE rows for ``workload``.
    """
    out = {}
    for m in METHODS:
        rows = [r for r in bench["rows"] if r["method"] == m and r["workload"] == workload and r["temperature"] == 0
                and r.get("source", "peagle_lab") == "peagle_lab" and r["per_position_acceptance"]]
        if not rows:
            continue
        k = max(r["k"] for r in rows)
        top = [r for r in rows if r["k"] == k]
        drafts = sum(r["num_drafts"] for r in top) or len(top)
        out[m] = tuple(sum(r["per_position_acceptance"][i] * (r["num_drafts"] or 1) for r in top) / drafts
                       for i in range(k))
    if set(out) != set(METHODS):
        have = sorted({r["workload"] for r in bench["rows"] if r["method"] in METHODS})
        raise ValueError(f"workload={workload!r}: the sweep needs eagle3 and peagle rows; its workloads: {have}")
    return out


def workloads_of(bench: Mapping) -> list[str]:
    """The workloads a sweep measured both methods on, in its row order."""
    names = list(dict.fromkeys(r["workload"] for r in bench["rows"] if r["method"] in METHODS))
    return [w for w in names if {r["method"] for r in bench["rows"] if r["workload"] == w} >= set(METHODS)]


def code_workload(bench: Mapping) -> str:
    """The sweep's HumanEval workload ("humaneval", or "code" in sweeps that call it so).

    >>> code_workload({"rows": [{"workload": w, "method": m} for w in ("chat", "code") for m in METHODS]})
    'code'
    """
    have = workloads_of(bench)
    for name in ("humaneval", "code"):
        if name in have:
            return name
    raise ValueError(f"the sweep has no HumanEval workload (humaneval or code); its workloads: {have}")


def al_at(acceptance: Acceptance | Sequence[float], k: int) -> float:
    """AL(K) = 1 + a_1 + … + a_K from a geometric :class:`~peagle_lab.lab.kmodel.Acceptance` or measured a_i.

    >>> al_at((0.7, 0.5, 0.3), 2), round(al_at(Acceptance(0.5, 0.5), 2), 3)
    (2.2, 1.75)
    """
    if isinstance(acceptance, Acceptance):
        return acceptance_length(acceptance, k)
    if k > len(acceptance):
        raise ValueError(f"K={k}: the measured acceptance has {len(acceptance)} positions")
    return 1.0 + sum(acceptance[:k])


# ------------------------------------------------------------------ prediction
def predicted_tps(scale: Mapping, shape: str, method: str, k: int, concurrency: int,
                  acceptance: Acceptance | Sequence[float], depth: int = PEAGLE_DEPTH) -> float:
    """TPS(K, c) = 1000 · c · AL(K) / step_ms(K, c) at ``shape`` (P-EAGLE's drafter ``depth`` layers)."""
    step = step_costs(scale, shape, method, k, concurrency, depth)["step_ms"]
    return 1000.0 * concurrency * al_at(acceptance, k) / step


def usable_ks(acceptance: Acceptance | Sequence[float], ks: Sequence[int] = KS) -> list[int]:
    """The K of ``ks`` the acceptance covers (measured a_i stop at the sweep's largest K).

    >>> usable_ks((0.7, 0.5, 0.3)), len(usable_ks(Acceptance(0.5, 0.5)))
    ([1, 2, 3], 8)
    """
    return [k for k in ks if isinstance(acceptance, Acceptance) or k <= len(acceptance)]


def best_k(scale: Mapping, shape: str, method: str, concurrency: int, acceptance, depth: int = PEAGLE_DEPTH,
           ks: Sequence[int] = KS) -> tuple[int, float]:
    """(K, TPS) of the method's highest predicted throughput over ``ks`` the acceptance covers (the smaller
    K on a tie)."""
    ks = usable_ks(acceptance, ks)
    tps = {k: predicted_tps(scale, shape, method, k, concurrency, acceptance, depth) for k in ks}
    k = max(ks, key=lambda k: (round(tps[k], 9), -k))
    return k, tps[k]


def speedup_table(scale: Mapping, shape: str, acceptance: Mapping[str, object], depth: int = PEAGLE_DEPTH,
                  ks: Sequence[int] = KS) -> list[dict]:
    """Predicted P-EAGLE ÷ EAGLE-3 (each at its best K) at every concurrency the scale lab measured at
    ``shape``, beside the paper's SPEED-Bench speed-up at that c (GPT-OSS 20B, B200).

    Returns:
        ``[{"concurrency", "peagle_k", "eagle3_k", "peagle_tps", "eagle3_tps", "ratio", "paper"}]``.
    """
    cs = sorted({r["concurrency"] for r in scale["costs"] if r["shape"] == shape and r["method"] == "peagle"
                 and r["depth"] == depth})
    if not cs:
        raise ValueError(f"shape={shape!r}, P-EAGLE depth {depth}: not in the scale lab's costs")
    out = []
    for c in cs:
        (pk, pt), (ek, et) = (best_k(scale, shape, m, c, acceptance[m], depth, ks) for m in ("peagle", "eagle3"))
        out.append({"concurrency": c, "peagle_k": pk, "eagle3_k": ek, "peagle_tps": pt, "eagle3_tps": et,
                    "ratio": pt / et, "paper": SPEED_BENCH_SPEEDUP.get(c)})
    return out


def tps_curves(scale: Mapping, shape: str, concurrency: int, acceptance: Mapping[str, object],
               depth: int = PEAGLE_DEPTH, ks: Sequence[int] = KS) -> dict[str, dict[int, float]]:
    """Predicted TPS per method at every K of ``ks`` its acceptance covers: ``{method: {K: TPS}}``."""
    return {m: {k: predicted_tps(scale, shape, m, k, concurrency, acceptance[m], depth)
                for k in usable_ks(acceptance[m], ks)} for m in METHODS}


def step_split(scale: Mapping, shape: str, concurrency: int, k: int | Mapping[str, int],
               depth: int = PEAGLE_DEPTH) -> dict[str, dict]:
    """One step's parts (verify, prep, draft, host; ms) per method at K (one K, or ``{method: K}``)."""
    parts = ("verify_ms", "prep_ms", "draft_ms", "host_ms")
    ks = k if isinstance(k, Mapping) else {m: k for m in METHODS}
    return {m: {p: step_costs(scale, shape, m, ks[m], concurrency, depth)[p] for p in parts} for m in METHODS}


def shapes_of(scale: Mapping) -> list[str]:
    """The shapes with costs for both methods, in the scale lab's order (``NAME+moe`` after NAME)."""
    names = list(dict.fromkeys(r["shape"] for r in scale["costs"]))
    return [n for n in names if {r["method"] for r in scale["costs"] if r["shape"] == n} >= set(METHODS)]


def concurrencies_of(scale: Mapping, shape: str) -> list[int]:
    return sorted({r["concurrency"] for r in scale["costs"] if r["shape"] == shape})


def depths_of(scale: Mapping, shape: str) -> list[int]:
    return sorted({r["depth"] for r in scale["costs"] if r["shape"] == shape and r["method"] == "peagle"})


def drafting_cost_to_match(scale: Mapping, shape: str, concurrency: int, acceptance: Mapping[str, object],
                           ratio: float, depth: int = PEAGLE_DEPTH) -> float | None:
    """The factor on EAGLE-3's drafter time (its K passes) at which the predicted P-EAGLE ÷ EAGLE-3 reaches
    ``ratio``: how much dearer EAGLE-3's drafting would have to be, relative to the target, than in this
    engine. None where no factor in [0.05, 50] reaches it."""
    def predicted_ratio(factor: float) -> float:
        _, p = best_k(scale, shape, "peagle", concurrency, acceptance["peagle"], depth)
        best = 0.0
        for k in usable_ks(acceptance["eagle3"]):
            c = step_costs(scale, shape, "eagle3", k, concurrency, depth)
            step = c["step_ms"] + (factor - 1.0) * c["draft_ms"]
            best = max(best, 1000.0 * concurrency * al_at(acceptance["eagle3"], k) / step)
        return p / best

    lo, hi = 0.05, 50.0
    if not predicted_ratio(lo) <= ratio <= predicted_ratio(hi):
        return None
    for _ in range(50):  # the ratio grows with the factor
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted_ratio(mid) < ratio else (lo, mid)
    return (lo + hi) / 2


# ------------------------------------------------------------------ the check against our sweep
def row_context(bench: Mapping, row: Mapping) -> float | None:
    """The mean context a bench row's decode steps attend to: as the engine recorded it (``mean_context``, over
    busy row-steps), else its workload's mean prompt plus half its mean answer (tokens); None where the sweep
    records neither.

    >>> row_context({"config": {"prompts": {"code": {"mean_tokens": 190.0}}}},
    ...             {"workload": "code", "output_tokens": 2000, "num_prompts": 10})
    290.0
    """
    if row.get("mean_context") is not None:
        return float(row["mean_context"])
    info = ((bench.get("config") or {}).get("prompts") or {}).get(row["workload"])
    if not info or not row.get("num_prompts"):
        return None
    return info["mean_tokens"] + row["output_tokens"] / row["num_prompts"] / 2


def fit_contexts(row: Mapping) -> tuple[float, float] | None:
    """(mean, longest) context of a bench row's steps for ``scale_costs.step_costs_fit``: over every row the
    steps ran (``mean_row_context``, ``longest_row_context``: the decode-attention kernel walks each row's key
    range, an idle row's too, which the engine keeps at K + 1 keys of the row's own block), else over the busy
    rows; None where the row records no ``longest_context`` (a sweep whose engine did not record contexts).

    >>> fit_contexts({"mean_context": 300.0, "longest_context": 900.0, "mean_row_context": 320.0,
    ...               "longest_row_context": 1000.0}), fit_contexts({"mean_context": 300.0})
    ((320.0, 1000.0), None)
    """
    if row.get("longest_context") is None:
        return None
    mean = row.get("mean_row_context", row["mean_context"])
    return float(mean), float(row.get("longest_row_context", row["longest_context"]))


def busy_rows(row: Mapping) -> float:
    """A bench row's mean busy rows a step: ``row_steps / num_steps`` where it records them, else its c."""
    steps = row.get("num_steps") or 0
    return row["row_steps"] / steps if steps and row.get("row_steps") else float(row["concurrency"])


def _cell_step(scale: Mapping, shape: str, method: str, k: int, rows: float, context: float | None,
               depth: int, contexts: tuple[float, float] | None, concurrency: int) -> tuple[float, str]:
    """(a cell's predicted step ms, the kind of scale-lab runs it came from: "fit", "ragged" or "uniform").

    A cell at c = ``concurrency`` that records the contexts its steps attended to (``contexts``: mean and
    longest, :func:`fit_contexts`) reads the fit of every run at c (``scale_costs.step_costs_fit``, uniform and
    ragged runs together: "fit"), where the runs at c include a ragged one. A static batch whose steps ran
    fewer ``rows`` than c on average (it drops each finished row) reads its step linear in rows from the
    uniform runs' step at the largest concurrency at or below its rows to that fit's (``step_costs_toward``).

    Ragged runs (:func:`~peagle_lab.lab.scale_runs.ragged_runs`) predict a step of more than one busy row at a
    known context where one has costs for the shape, method and depth (``scale_costs.step_costs_ragged``); one
    row is one request's context, never ragged, so c = 1 cells, and cells of unknown context, read the uniform
    runs.
    """
    if contexts is not None and concurrency > 1:
        try:
            group = attention_tile(scale, shape, concurrency)  # K read within the attention tile its rows fill
            fit = step_costs_fit(fit_runs(scale), shape, method, k, concurrency, *contexts, depth, group)
            return step_costs_toward(context_runs(scale), shape, method, k, rows, contexts[0], concurrency, fit,
                                     depth)["step_ms"], "fit"
        except ValueError:  # no ragged run at c: the paths below
            pass
    if context is None:
        return step_costs_at_rows(scale, shape, method, k, rows, depth)["step_ms"], "uniform"
    # runs with one-token stand-ins for idle rows (--short-rows) only join the fit, which knows each cell's contexts
    ragged = [run for run in ragged_runs(scale) if has_costs(run, shape, method, depth) and not short_rows(run)]
    if rows > 1 and ragged:
        step = step_costs_ragged(context_runs(scale), ragged, shape, method, k, rows, context, depth)
        return step["step_ms"], "ragged"
    return step_costs_at_context(context_runs(scale), shape, method, k, rows, context, depth)["step_ms"], "uniform"


def check_against_bench(scale: Mapping, bench: Mapping, shape: str = "smollm2-135m",
                        depth: int = PEAGLE_DEPTH) -> list[dict]:
    """Every temperature-0 EAGLE-3 / P-EAGLE cell of ``bench`` whose c the scale lab measured at ``shape``:
    predicted decode TPS (acceptance (a) of the cell's workload, the scale lab's step) against measured,
    both at the rows the cell's steps kept busy and the context they attended to.

    The scale lab keeps all c rows busy every step. A static batch of answers to EOS does not: its requests
    finish at different steps and the batch compacts, so most of its steps run fewer rows (a continuous
    batch, ``"continuous": true`` in the row, refills them). Each cell is therefore predicted at its mean
    busy rows (``row_steps / num_steps``; the step interpolated between the scale lab's concurrencies)
    and its measured decode TPS counts those rows; ``full_rows_error`` is the error of the scale lab's
    full-c prediction against ``kmodel.measured_decode_tps``, which assumes c busy rows.

    Answers to EOS attend to longer contexts than the scale lab's default prompt: where runs at other prompt
    lengths are committed (:func:`~peagle_lab.lab.scale_runs.context_runs`), the step is interpolated to the cell's :func:`row_context`. The
    requests of a batch also differ in context, and the longest sets the decode-attention kernel's pace: where
    ragged runs are committed (:func:`~peagle_lab.lab.scale_runs.ragged_runs`, ``peagle-lab scale --prompt-range``), a cell of more than one
    busy row reads its step from them (``step_runs``: "ragged"; else "uniform"). A sweep whose engine recorded
    the contexts its steps attended to (:func:`fit_contexts`: the mean and the longest) predicts a cell that
    kept its c rows from both, by the fit of every run at c (``step_runs``: "fit",
    ``scale_costs.step_costs_fit``); ``context`` is then the recorded mean, ``longest_context`` the longest.

    Returns:
        ``[{"workload", "method", "k", "concurrency", "rows", "context", "longest_context", "continuous",
        "step_runs", "busy_share" (the share of the rows' steps that served a request still decoding), "predicted_tps",
        "measured_tps",
        "error", "full_rows_error", "predicted_step_ms", "measured_step_ms", "predicted_al", "measured_al"}]``,
        error = predicted / measured − 1 = (1 + AL error) / (1 + step error) − 1.
    """
    measured_c = {r["concurrency"] for r in scale["costs"] if r["shape"] == shape}
    rows = [r for r in bench["rows"] if r["method"] in METHODS and r["temperature"] == 0 and r["k"] >= 1
            and r.get("source", "peagle_lab") == "peagle_lab" and r["concurrency"] in measured_c]
    acc = {w: measured_acceptance(bench, w) for w in sorted({r["workload"] for r in rows})}
    out = []
    for r in sorted(rows, key=lambda r: (r["workload"], r["method"], r["concurrency"], r["k"])):
        al, c, busy = al_at(acc[r["workload"]][r["method"]], r["k"]), r["concurrency"], busy_rows(r)
        context, contexts = row_context(bench, r), fit_contexts(r)
        step, kind = _cell_step(scale, shape, r["method"], r["k"], busy, context, depth, contexts, c)
        full = step_costs(scale, shape, r["method"], r["k"], c, depth)["step_ms"]
        pred, meas = 1000.0 * busy * al / step, 1000.0 * busy * r["acceptance_length"] / r["step_ms"]
        out.append({"workload": r["workload"], "method": r["method"], "k": r["k"], "concurrency": c,
                    "rows": busy, "context": context, "longest_context": contexts[1] if contexts else None,
                    "continuous": bool(r.get("continuous")), "step_runs": kind,
                    # bench.analysis.rows_busy's share, from the row's dict (a check's rows may carry fewer fields)
                    "busy_share": r["num_drafts"] / r["row_steps"] if r.get("row_steps") else None,
                    "predicted_tps": pred,
                    "measured_tps": meas, "error": pred / meas - 1.0,
                    "full_rows_error": 1000.0 * c * al / full / measured_decode_tps(r) - 1.0,
                    "predicted_step_ms": step, "measured_step_ms": r["step_ms"],
                    "predicted_al": al, "measured_al": r["acceptance_length"]})
    return out


def check_summary(cells: Sequence[Mapping], tolerance: float = 0.10) -> dict:
    """How many cells lie within ``tolerance`` (0.10 = 10 %), the largest absolute error, and whether all do.

    >>> check_summary([{"error": 0.05}, {"error": -0.12}])
    {'cells': 2, 'within': 1, 'max_abs_error': 0.12, 'all_within': False}
    """
    errs = [abs(c["error"]) for c in cells]
    within = sum(e <= tolerance for e in errs)
    return {"cells": len(errs), "within": within, "max_abs_error": round(max(errs, default=0.0), 4),
            "all_within": bool(errs) and within == len(errs)}


def baseline_strength(bench: Mapping, workload: str, concurrency: int = 1) -> dict:
    """How much each method's AL gains from K = 3 to K = 7, ours beside the paper's public baseline on HumanEval:
    a strong EAGLE-3 (deep training-time test) keeps accepting at depth.

    Ours are the ALs that ``bench``'s cells at K = 3 and K = 7 measured at ``concurrency`` (``paper_data.measured_al``,
    the reading docs/paper.md's rows use), not AL rebuilt from the largest K's per-position acceptance
    (:func:`measured_acceptance`, the predictions' source (a)); a method lacking either cell has no ``ours_`` entry.

    Returns:
        {"workload", "concurrency", "ours_<method>": {"al3", "al7", "gain"}, "paper_<method>": {…}} per method.
    """
    out = {"workload": workload, "concurrency": concurrency}
    for m in METHODS:
        al3, al7 = (measured_al(bench, m, workload, k, concurrency) for k in (3, 7))
        if al3 is not None and al7 is not None:
            out[f"ours_{m}"] = {"al3": al3, "al7": al7, "gain": al7 - al3}
        out[f"paper_{m}"] = {"al3": HUMANEVAL_AL[(m, 3)], "al7": HUMANEVAL_AL[(m, 7)],
                             "gain": HUMANEVAL_AL[(m, 7)] - HUMANEVAL_AL[(m, 3)]}
    return out

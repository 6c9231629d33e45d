"""Notebook 8's texts on what sets a batch's step: the scale lab's runs against the mean and the longest context
their steps attend to, the fit step ≈ a + b · mean + c · longest over them (``bench.scale_costs.context_fit``), and
the longest context that fit needs to match each step a continuous-batching sweep measured, and the verify pass's
step where a decode-attention program's query rows outgrow a 16-row tile.

A decode-attention program walks one request's keys (at c = 64 one program per request and K/V head), so the
longest request in a batch sets the attention's pace, beside the share of the work that grows with the mean.
Uniform runs hold mean = longest; ragged runs (prompts drawn from a range) pull the two apart.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..bench.scale import SHAPES
from ..bench.scale_costs import context_fit
from ..kernels.decode_attention import tile_rows
from . import predict
from .kmodel import METHODS
from .scale_runs import fit_runs

__all__ = ["fit_table_text", "longest_needed", "longest_needed_text", "verify_by_k_text"]

NAMES = {"eagle3": "EAGLE-3", "peagle": "P-EAGLE"}


def fit_table_text(scale: Mapping, method: str = "eagle3", k: int = 1, concurrency: int = 64,
                   shape: str = "smollm2-135m", depth: int = predict.PEAGLE_DEPTH) -> str:
    """Each run's measured step at (``method``, K, c) beside its contexts, shortest longest context first, with the
    fitted step and the fit's coefficients (µs per token of context)."""
    fit = context_fit(fit_runs(scale), shape, method, k, concurrency, depth)
    a, b, c = fit["coef"]["step_ms"]
    lines = [f"{NAMES[method]}, K = {k}, c = {concurrency}: each scale-lab run's step against the contexts its steps "
             "attend to (tokens)", f"{'mean':>7}{'longest':>9}{'step ms':>9}{'fitted':>8}"]
    for p in sorted(fit["points"], key=lambda p: (p["longest"], p["mean"])):
        lines.append(f"{p['mean']:>7.0f}{p['longest']:>9.0f}{p['step_ms']:>9.2f}{p['fitted_ms']:>8.2f}")
    lines.append(f"fit: step = {a:.2f} ms + {1e3 * b:.2f} µs x mean + {1e3 * c:.2f} µs x longest")
    return "\n".join(lines)


def longest_needed(scale: Mapping, row: Mapping, mean: float, shape: str = "smollm2-135m",
                   depth: int = predict.PEAGLE_DEPTH) -> float:
    """The longest context at which the fit's step equals the bench ``row``'s measured ``step_ms``, its steps
    attending to ``mean`` tokens on average: (step − a − b · mean) / c.

    """
    fit = context_fit(fit_runs(scale), shape, row["method"], row["k"], row["concurrency"], depth)
    a, b, c = fit["coef"]["step_ms"]
    return (row["step_ms"] - a - b * mean) / c


def longest_needed_text(scale: Mapping, bench: Mapping, ks: Sequence[int] = (1, 3, 5, 8),
                        shape: str = "smollm2-135m") -> str:
    """For each speculative cell of ``bench`` at the measured K values: its measured step, the mean context
    its steps attend to, the longest context the fit needs for that step, the longest the steps recorded, and
    the longest a request of its workload can reach (its longest prompt plus the sweep's ``max_new_tokens``).

    Where the row records its contexts over every row a step ran (:func:`~peagle_lab.lab.predict.fit_contexts`,
    an idle row counted at 1), the mean and the recorded longest are those, as the check reads them; else the
    mean is :func:`~peagle_lab.lab.predict.row_context` and the recorded longest "—"."""
    cfg = bench["config"]
    lines = ["the longest context at which the fit gives each cell's measured step, beside the longest recorded",
             f"{'workload':<9}{'method':<9}{'K':>2}{'step ms':>9}{'mean':>6}{'longest needed':>16}{'recorded':>10}"
             f"{'possible':>10}"]
    for r in sorted(bench["rows"], key=lambda r: (r["workload"], r["method"], r["k"])):
        if r["method"] not in METHODS or r["k"] not in ks or r["temperature"] != 0:
            continue
        contexts = predict.fit_contexts(r)
        mean = contexts[0] if contexts else predict.row_context(bench, r)
        if mean is None:
            continue
        recorded = f"{contexts[1]:.0f}" if contexts else "—"
        possible = cfg["prompts"][r["workload"]]["max_tokens"] + cfg["max_new_tokens"]
        lines.append(f"{r['workload']:<9}{NAMES[r['method']]:<9}{r['k']:>2}{r['step_ms']:>9.2f}{mean:>6.0f}"
                     f"{longest_needed(scale, r, mean, shape):>16.0f}{recorded:>10}{possible:>10}")
    return "\n".join(lines)


def verify_by_k_text(bench: Mapping, concurrency: int = 64, shape: str = "smollm2-135m") -> str:
    """Each speculative method's measured verify pass (ms) per K at ``concurrency``, per workload, under the
    query rows a decode-attention program holds at that K and the tile they fill."""
    cfg = SHAPES[shape].config
    rep = cfg.num_attention_heads // cfg.num_key_value_heads
    rows = [r for r in bench["rows"] if r["method"] in METHODS and r["concurrency"] == concurrency
            and r["temperature"] == 0 and r["k"] >= 1]
    ks = sorted({r["k"] for r in rows})
    cell = {(r["workload"], r["method"], r["k"]): r["verify_ms"] for r in rows}
    lines = [f"verify pass, ms a step at c = {concurrency}, by K ({rep} query heads a K/V head, T = K + 1 tokens)",
             f"{'K':<18}" + "".join(f"{k:>7}" for k in ks),
             f"{'query rows':<18}" + "".join(f"{rep * (k + 1):>7}" for k in ks),
             f"{'tile rows':<18}" + "".join(f"{tile_rows(rep * (k + 1)):>7}" for k in ks)]
    for workload, method in sorted({(w, m) for w, m, _ in cell}):
        lines.append(f"{workload + ' ' + NAMES[method]:<18}" + "".join(
            f"{cell[(workload, method, k)]:>7.2f}" if (workload, method, k) in cell else f"{'—':>7}" for k in ks))
    return "\n".join(lines)

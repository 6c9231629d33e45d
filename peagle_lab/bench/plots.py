"""Plotly figures from result objects — the only module of peagle_lab that imports plotly.

Every function is pure: result objects in, a ``plotly.graph_objects.Figure`` out; nothing
is shown or written here (``peagle_lab.bench.report`` puts the figures into HTML, the
notebooks display them). The file is organised in sections, one per kind of result.
"""
from __future__ import annotations

import plotly.graph_objects as go

from .analysis import best_k, pooled_acceptance, ratios
from .schema import BenchResult, BenchRow

METHOD_ORDER = ("baseline", "eagle3", "peagle")
METHOD_LABELS = {"baseline": "plain decoding", "eagle3": "EAGLE-3", "peagle": "P-EAGLE",
                 "transformers": "transformers static cache"}
METHOD_COLORS = {"baseline": "#7f7f7f", "eagle3": "#1f77b4", "peagle": "#d62728", "transformers": "#2ca02c"}
WORKLOAD_DASH = {"chat": "solid", "code": "dash", "long": "dot"}
STEP_PART_COLORS = {"verify": "#4c72b0", "draft": "#dd8452", "prep": "#55a868", "other": "#c7c7c7"}


# =====================================================================================
# Benchmark figures (peagle_lab.bench): TPS, speed-ups, acceptance, step-time split
# =====================================================================================

def _temperature(result: BenchResult, temperature: float | None) -> float:
    """The temperature to plot: the one asked for, else the first one in the rows."""
    temps = sorted({r.temperature for r in result.rows})
    if temperature is None:
        if not temps:
            raise ValueError("the result has no rows to plot")
        return temps[0]
    if temperature not in temps:
        raise ValueError(f"temperature={temperature} is not in the result (it has {temps})")
    return temperature


def _concurrency_axis(fig: go.Figure, values) -> None:
    ticks = sorted(set(values))
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(c) for c in ticks], title="concurrency c")


def bench_tps_vs_concurrency(result: BenchResult, workload: str, temperature: float | None = None) -> go.Figure:
    """Output TPS against concurrency, each method at its best K per c (K in the hover and labels).

    The transformers reference, where measured, is drawn as separate markers.
    """
    t = _temperature(result, temperature)
    best = best_k(result.rows)
    fig = go.Figure()
    cs = []
    for m in METHOD_ORDER:
        pts = sorted((c, r) for (w, tt, mm, c), r in best.items() if (w, tt, mm) == (workload, t, m))
        if not pts:
            continue
        cs += [c for c, _ in pts]
        fig.add_trace(go.Scatter(
            x=[c for c, _ in pts], y=[r.tps for _, r in pts], mode="lines+markers+text", name=METHOD_LABELS[m],
            line=dict(color=METHOD_COLORS[m]), text=[f"K={r.k}" if r.k else "" for _, r in pts],
            textposition="top center",
            hovertemplate="c=%{x}<br>%{y:.0f} tok/s<br>%{text}<extra>" + METHOD_LABELS[m] + "</extra>"))
    ref = sorted((r.concurrency, r) for r in result.rows
                 if r.source == "transformers" and r.workload == workload and r.temperature == t)
    if ref:
        cs += [c for c, _ in ref]
        fig.add_trace(go.Scatter(x=[c for c, _ in ref], y=[r.tps for _, r in ref], mode="markers",
                                 name=METHOD_LABELS["transformers"],
                                 marker=dict(color=METHOD_COLORS["transformers"], symbol="diamond", size=11)))
    _concurrency_axis(fig, cs or [1])
    fig.update_yaxes(title="output tokens / s", rangemode="tozero")
    fig.update_layout(title=f"Throughput vs concurrency — {workload} (T={t:g}, each method at its best K)")
    return fig


def bench_speedup(result: BenchResult, numerator: str = "peagle", denominator: str = "eagle3",
                  temperature: float | None = None) -> go.Figure:
    """TPS ratio of two methods (each at its best K) per concurrency, one line per workload."""
    t = _temperature(result, temperature)
    fig = go.Figure()
    rs = [r for r in ratios(result.rows, numerator, denominator) if r.temperature == t]
    for w in dict.fromkeys(r.workload for r in rs):
        pts = [r for r in rs if r.workload == w]
        fig.add_trace(go.Scatter(
            x=[r.concurrency for r in pts], y=[r.ratio for r in pts], mode="lines+markers", name=w,
            line=dict(dash=WORKLOAD_DASH.get(w, "solid")),
            customdata=[[r.numerator.k, r.denominator.k] for r in pts],
            hovertemplate="c=%{x}<br>%{y:.2f}×<br>K %{customdata[0]} vs %{customdata[1]}<extra>" + w + "</extra>"))
    fig.add_hline(y=1.0, line=dict(color="black", width=1, dash="dot"))
    _concurrency_axis(fig, [r.concurrency for r in rs] or [1])
    fig.update_yaxes(title=f"{METHOD_LABELS[numerator]} / {METHOD_LABELS[denominator]} TPS")
    fig.update_layout(title=f"Speed-up of {METHOD_LABELS[numerator]} over {METHOD_LABELS[denominator]} "
                            f"(T={t:g}, best K each)")
    return fig


def bench_acceptance_length_vs_k(result: BenchResult, temperature: float | None = None) -> go.Figure:
    """Acceptance length against K, per method (colour) and workload (dash), pooled over c."""
    t = _temperature(result, temperature)
    acc = [a for a in pooled_acceptance(result.rows) if a.temperature == t]
    fig = go.Figure()
    for m in METHOD_ORDER:
        for w in dict.fromkeys(a.workload for a in acc):
            pts = [a for a in acc if (a.method, a.workload) == (m, w)]
            if pts:
                fig.add_trace(go.Scatter(
                    x=[a.k for a in pts], y=[a.acceptance_length for a in pts], mode="lines+markers",
                    name=f"{METHOD_LABELS[m]} · {w}", line=dict(color=METHOD_COLORS[m], dash=WORKLOAD_DASH.get(w)),
                    customdata=[a.num_drafts for a in pts],
                    hovertemplate="K=%{x}<br>AL %{y:.2f}<br>%{customdata} drafts<extra></extra>"))
    fig.update_xaxes(title="K (draft tokens per step)", dtick=1)
    fig.update_yaxes(title="acceptance length (tokens per step)", rangemode="tozero")
    fig.update_layout(title=f"Acceptance length vs K (T={t:g}, pooled over concurrency)")
    return fig


def bench_per_position_acceptance(result: BenchResult, k: int | None = None,
                                  temperature: float | None = None) -> go.Figure:
    """Per-position acceptance (vLLM's, unconditional) at one K; default the largest K measured."""
    t = _temperature(result, temperature)
    acc = [a for a in pooled_acceptance(result.rows) if a.temperature == t and a.per_position]
    if k is None:
        k = max((a.k for a in acc), default=0)
    fig = go.Figure()
    for a in (a for a in acc if a.k == k):
        fig.add_trace(go.Scatter(
            x=list(range(1, k + 1)), y=list(a.per_position), mode="lines+markers",
            name=f"{METHOD_LABELS[a.method]} · {a.workload}",
            line=dict(color=METHOD_COLORS[a.method], dash=WORKLOAD_DASH.get(a.workload))))
    fig.update_xaxes(title="draft position", dtick=1)
    fig.update_yaxes(title="accepted at this position / drafts", range=[0, 1])
    fig.update_layout(title=f"Per-position acceptance at K={k} (T={t:g})")
    return fig


def step_parts(row: BenchRow) -> dict[str, float]:
    """Milliseconds of one decode step by part; "other" is host work and gaps (mean step − medians)."""
    parts = {p: getattr(row, f"{p}_ms") or 0.0 for p in ("verify", "draft", "prep")}
    parts["other"] = max((row.step_ms or 0.0) - sum(parts.values()), 0.0)
    return parts


def bench_step_time_split(result: BenchResult, workload: str, temperature: float | None = None) -> go.Figure:
    """Stacked bars: where one decode step's time goes, per concurrency and method (best K)."""
    t = _temperature(result, temperature)
    best = [r for (w, tt, _, _), r in best_k(result.rows).items() if (w, tt) == (workload, t)]
    best.sort(key=lambda r: (r.concurrency, METHOD_ORDER.index(r.method)))
    x = [[f"c={r.concurrency}" for r in best], [f"{METHOD_LABELS[r.method]}{f' K={r.k}' if r.k else ''}" for r in best]]
    fig = go.Figure()
    for part, color in STEP_PART_COLORS.items():
        fig.add_trace(go.Bar(x=x, y=[step_parts(r)[part] for r in best], name=part, marker_color=color))
    fig.update_layout(barmode="stack", title=f"Time per decode step — {workload} (T={t:g}, best K; medians)")
    fig.update_yaxes(title="ms per step")
    return fig

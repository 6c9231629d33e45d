"""Plotly figures of the scale lab and its predictions (notebook 8), each a pure function of computed data.

| figure                   | from                                              |
| ------------------------ | ------------------------------------------------- |
| ``scale_step_figure``    | the scale lab's JSON: a step's parts per shape    |
| ``prediction_figure``    | ``predict.tps_curves`` and ``predict.step_split`` |
| ``speedup_figure``       | ``predict.speedup_table`` rows per source         |

Like ``figures`` and ``mechanics_figures``, the only kind of module here that imports plotly; nothing
here computes a result.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .figures import METHOD_COLORS, METHOD_NAMES

__all__ = ["PARTS", "scale_step_figure", "prediction_figure", "speedup_figure"]

PARTS = {"verify_ms": ("verify (target, K + 1 tokens)", "#4C78A8"), "prep_ms": ("prep (draft batch)", "#72B7B2"),
         "draft_ms": ("drafter passes", "#F58518"), "host_ms": ("host", "#BAB0AC")}


def _stacked(fig: go.Figure, x, splits: Sequence[Mapping], row=None, col=None, legend: bool = True) -> None:
    """One stacked bar per x from ``splits`` (each a {part: ms} dict)."""
    for part, (name, color) in PARTS.items():
        fig.add_trace(go.Bar(x=x, y=[s[part] for s in splits], name=name, marker_color=color, legendgroup=part,
                             showlegend=legend, hovertemplate=f"{name}: %{{y:.3f}} ms<extra></extra>"),
                      row=row, col=col)


def scale_step_figure(splits: Mapping[str, Mapping[str, Mapping]], *, k: int, concurrency: int, depth: int,
                      device: str) -> go.Figure:
    """A decode step's parts at K for each shape, EAGLE-3 beside P-EAGLE.

    Args:
        splits: ``{shape: predict.step_split(...)}`` (each ``{method: {part: ms}}``).
    """
    shapes = list(splits)
    x = [[s for s in shapes for _ in ("eagle3", "peagle")],
         [METHOD_NAMES[m] for _ in shapes for m in ("eagle3", "peagle")]]
    flat = [splits[s][m] for s in shapes for m in ("eagle3", "peagle")]
    fig = go.Figure()
    _stacked(fig, x, flat)
    fig.update_layout(barmode="stack", height=430, yaxis_title="ms per decode step",
                      title=f"One decode step at K = {k}, c = {concurrency} (P-EAGLE drafter: {depth} layers), "
                            f"{device}, random weights")
    return fig


def prediction_figure(curves: Mapping[str, Mapping[int, float]], split: Mapping[str, Mapping], *,
                      title: str) -> go.Figure:
    """Left: predicted TPS against K for both methods (``{method: {K: TPS}}``, best K starred); right: each
    method's step at its best K (``split``: ``{method: {part: ms}}``)."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38],
                        subplot_titles=("predicted tokens/s", "one step at each method's best K"))
    best = {m: max(tps, key=lambda k: (tps[k], -k)) for m, tps in curves.items()}
    for m, tps in curves.items():
        fig.add_trace(go.Scatter(x=list(tps), y=list(tps.values()), mode="lines+markers", name=METHOD_NAMES[m],
                                 line_color=METHOD_COLORS[m]), row=1, col=1)
        k = best[m]
        fig.add_trace(go.Scatter(x=[k], y=[tps[k]], mode="markers", showlegend=False,
                                 marker=dict(size=14, symbol="star", color=METHOD_COLORS[m]),
                                 hovertemplate=f"{METHOD_NAMES[m]} best K = {k}<extra></extra>"), row=1, col=1)
    _stacked(fig, [f"{METHOD_NAMES[m]} K={best[m]}" for m in split], list(split.values()), row=1, col=2)
    fig.update_xaxes(title_text="K (draft tokens per step)", dtick=1, row=1, col=1)
    fig.update_yaxes(title_text="output tokens/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=2)
    fig.update_layout(barmode="stack", height=420, title=title)
    return fig


def speedup_figure(tables: Mapping[str, Sequence[Mapping]], *, shape: str, paper: Mapping[int, float],
                   benchmark: str = "SPEED-Bench") -> go.Figure:
    """Predicted P-EAGLE ÷ EAGLE-3 (each at its best K) against c, one line per acceptance source, with the
    paper's measured speed-ups on ``benchmark`` (``paper``: {c: speed-up}) as markers."""
    fig = go.Figure()
    for name, rows in tables.items():
        fig.add_trace(go.Scatter(x=[r["concurrency"] for r in rows], y=[r["ratio"] for r in rows],
                                 mode="lines+markers", name=f"predicted, {name}"))
    cs = sorted(paper)
    fig.add_trace(go.Scatter(x=cs, y=[paper[c] for c in cs], mode="markers",
                             name=f"the paper, measured on {benchmark} (B200)",
                             marker=dict(size=12, symbol="diamond", color="black")))
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray")
    fig.update_xaxes(type="log", tickvals=cs, title_text="concurrency c")
    fig.update_yaxes(title_text="P-EAGLE ÷ EAGLE-3 throughput", rangemode="tozero")
    fig.update_layout(height=400, title=f"Predicted speed-up at the {shape} shape beside the paper's")
    return fig

"""Plotly figures of the explainer: the K model (notebook 5) and the mechanics drawn live (notebooks 2, 3).

| figure                       | from                                            | notebook |
| ---------------------------- | ----------------------------------------------- | -------- |
| ``k_model_figure``           | a ``kmodel.KFit`` (predicted beside measured)   | 5        |
| ``segment_masks_figure``     | ``mechanics.segment_masks``                     | 3        |
| ``training_memory_figure``   | ``mechanics.training_memory``                   | 3        |
| ``kv_cache_figure``          | ``mechanics.kv_write``                          | 2        |
| ``slot_inputs_figure``       | ``mechanics.slot_inputs``                       | 2        |
| ``inference_mask_figure``    | ``mechanics.inference_mask``                    | 2        |

Like ``figures``, nothing here computes a result: the numbers come from ``kmodel`` and
``mechanics``, which import no plotly.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .figures import KIND_COLORS, METHOD_COLORS, METHOD_NAMES
from .kmodel import KFit, acceptance_length, measured_decode_tps, predicted_peak_k, predicted_tps

__all__ = ["k_model_figure", "segment_masks_figure", "training_memory_figure", "kv_cache_figure",
           "slot_inputs_figure", "inference_mask_figure"]


def k_model_figure(fit: KFit, ks: Sequence[int] | None = None) -> go.Figure:
    """Predicted (dashed) beside measured (markers) decode throughput and AL against K, per method.

    A star marks each method's predicted peak K. ``fig.data`` holds, per method, the measured
    TPS, the predicted TPS, the peak star, the measured AL and the predicted AL, in that order.
    """
    ks = list(ks or range(1, max(fit.ks) + 1))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("decode throughput (c · AL / step time)",
                                                        "acceptance length"))
    for method, model in fit.models.items():
        style = dict(color=METHOD_COLORS[method])
        name = METHOD_NAMES[method]
        rows = fit.rows[method]
        pred = [predicted_tps(model, k, fit.concurrency) for k in ks]
        peak = predicted_peak_k(model, fit.concurrency, ks)
        fig.add_trace(go.Scatter(x=[r["k"] for r in rows], y=[measured_decode_tps(r) for r in rows], mode="markers",
                                 marker=dict(size=9, **style), name=f"{name}, measured", legendgroup=method), 1, 1)
        fig.add_trace(go.Scatter(x=ks, y=pred, mode="lines", line=dict(dash="dash", **style),
                                 name=f"{name}, model", legendgroup=method), 1, 1)
        fig.add_trace(go.Scatter(x=[peak], y=[pred[ks.index(peak)]], mode="markers", legendgroup=method,
                                 marker=dict(symbol="star", size=16, line=dict(width=1, color="black"), **style),
                                 name=f"{name}: predicted peak K={peak}"), 1, 1)
        fig.add_trace(go.Scatter(x=[r["k"] for r in rows], y=[r["acceptance_length"] for r in rows], mode="markers",
                                 marker=dict(size=9, **style), showlegend=False, legendgroup=method), 1, 2)
        fig.add_trace(go.Scatter(x=ks, y=[acceptance_length(model.acceptance, k) for k in ks], mode="lines",
                                 line=dict(dash="dash", **style), showlegend=False, legendgroup=method), 1, 2)
    if fit.baseline_decode_tps:
        fig.add_hline(y=fit.baseline_decode_tps, line=dict(color=METHOD_COLORS["baseline"], dash="dot"),
                      annotation_text="plain decoding", row=1, col=1)
    fig.update_xaxes(title="K (draft tokens per step)", dtick=1)
    fig.update_yaxes(title="output tokens/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="tokens per step", rangemode="tozero", row=1, col=2)
    fig.update_layout(title=f"the K model beside the sweep: {fit.workload}, c={fit.concurrency}, "
                            f"{fit.device or 'the device'}", height=420)
    return fig


# ===================================================================== training (notebook 3)
SEGMENT_KEY_KINDS = ("hidden", "context key (recomputed, no loss)", "own key (with loss)")
SEGMENT_KEY_COLORS = {"hidden": "#FFFFFF", "context key (recomputed, no loss)": "#C7C7C7",
                      "own key (with loss)": "#4C78A8"}


def segment_masks_figure(masks) -> go.Figure:
    """One heatmap per segment: its queries (rows) against its keys (columns), labelled a{anchor}d{depth}.

    Grey cells are visible keys the segment recomputes as loss-free context, blue ones visible
    keys of its own elements. ``fig.data[s].z`` indexes ``SEGMENT_KEY_KINDS``.
    """
    fig = make_subplots(rows=1, cols=len(masks), horizontal_spacing=0.06,
                        subplot_titles=[f"segment {i}: anchors [{m.segment.lo}, {m.segment.hi}), {len(m.anchor)} rows"
                                        for i, m in enumerate(masks)])
    n = len(SEGMENT_KEY_KINDS) - 1
    scale = [[i / n, SEGMENT_KEY_COLORS[k]] for i, k in enumerate(SEGMENT_KEY_KINDS)]
    for col, m in enumerate(masks, start=1):
        labels = [f"a{a}d{d}" for a, d in zip(m.anchor.tolist(), m.depth.tolist())]
        own = m.segment.has_loss.tolist()
        z = [[(2 if own[j] else 1) if v else 0 for j, v in enumerate(row)] for row in m.visible.tolist()]
        fig.add_trace(go.Heatmap(z=z, x=labels, y=labels, zmin=0, zmax=n, colorscale=scale, showscale=False,
                                 xgap=1, ygap=1, hovertemplate="query %{y} → key %{x}<extra></extra>"), 1, col)
        fig.update_yaxes(autorange="reversed", tickfont=dict(size=8), row=1, col=col)
        fig.update_xaxes(tickfont=dict(size=8), row=1, col=col)
    for kind in SEGMENT_KEY_KINDS[1:]:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=kind,
                                 marker=dict(symbol="square", size=12, color=SEGMENT_KEY_COLORS[kind])))
    fig.update_layout(title="what each segment's queries attend to (rows: queries, columns: keys)",
                      height=520, width=max(700, 330 * len(masks)), plot_bgcolor="#F4F4F4",
                      legend=dict(orientation="h", yanchor="bottom", y=1.06, x=0), margin=dict(t=120))
    return fig


def training_memory_figure(rows, measured=None) -> go.Figure:
    """Attention-score memory of one training sequence per way of running it (log scale).

    Args:
        rows: ``mechanics.training_memory`` rows.
        measured: a parsed ``train_memory.json``: its peak GPU memory per S is drawn beside
            the COD-and-partitioned rows (a whole step of a real drafter, not scores alone).
    """
    fig = go.Figure(go.Bar(x=[r.label for r in rows], y=[r.score_gib for r in rows], name="attention scores (computed)",
                           marker_color="#4C78A8", text=[f"{r.score_gib:.1f} GiB<br>{r.positions} rows" for r in rows],
                           textposition="outside"))
    if measured is not None:
        got = {r["segments"]: r["peak_allocated_gib"] for r in measured["results"] if not r.get("oom")}
        xs = [r.label for r in rows if _segments_of(r.label) in got]
        fig.add_trace(go.Scatter(x=xs, y=[got[_segments_of(x)] for x in xs], mode="markers", name=
                                 f"measured peak memory of a step, {measured.get('device', '?')} (GiB)",
                                 marker=dict(size=12, symbol="diamond", color="#F58518")))
    top = max([r.score_gib for r in rows] + [1.0])
    fig.update_yaxes(type="log", title="GiB (log scale)", range=[-0.5, math.log10(top) + 0.5])
    heads = rows[0].heads if rows else 0
    fig.update_layout(title=f"one training sequence: attention scores of the largest pass (one layer, {heads} heads)",
                      height=440,
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0), margin=dict(t=110))
    return fig


def _segments_of(label: str) -> int | None:
    """S of a ``training_memory`` row label ("COD, S = 4 segments …" → 4; the single COD pass → 1)."""
    if label.startswith("COD, one pass"):
        return 1
    if "S = " in label:
        return int(label.split("S = ")[1].split()[0])
    return None


# ===================================================================== inference (notebook 2)
CACHE_KINDS = ("empty", "context (kept)", "written by this pass", "trash row (slot −1)")
CACHE_COLORS = {"empty": "#FFFFFF", "context (kept)": "#C7C7C7", "written by this pass": "#54A24B",
                "trash row (slot −1)": "#E45756"}


def _category_map(z, x, y, kinds, colors: dict, *, hover: str, xtitle: str, title: str, height: int,
                  text=None) -> go.Figure:
    """A heatmap whose cells are categories ``kinds[z]``, rows top-down, one legend square per kind but the first."""
    n = len(kinds) - 1
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, text=text, texttemplate="%{text}" if text else None, zmin=0, zmax=n,
                               showscale=False, xgap=2, ygap=2, hovertemplate=hover,
                               colorscale=[[i / n, colors[k]] for i, k in enumerate(kinds)]))
    for kind in kinds[1:]:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=kind,
                                 marker=dict(symbol="square", size=12, color=colors[kind])))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title=xtitle)
    fig.update_layout(title=title, height=height, plot_bgcolor="#F4F4F4",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0), margin=dict(t=100))
    return fig


def kv_cache_figure(write) -> go.Figure:
    """The cache rows of every request before and after the pass (``mechanics.kv_write``).

    Columns are positions 0..max_len−1 of the request's block, plus the one trash row all
    ``slot_mapping == −1`` writes go to; cells show the value held (the writing row + 1 after
    the pass). ``fig.data[0].z`` indexes ``CACHE_KINDS``.
    """
    L, c = write.max_len, write.num_requests
    x = [str(p) for p in range(L)] + ["trash"]
    z, text, y = [], [], []
    for b in range(c):
        for when, values in (("before", write.before), ("after", write.after)):
            row = values[b * L:(b + 1) * L].tolist() + [float(values[write.trash_slot])]
            changed = (write.before != write.after)[b * L:(b + 1) * L].tolist() + [False]
            kinds = [2 if (when == "after" and ch) else 1 if v < 0 else 0 for v, ch in zip(row, changed)]
            kinds[-1] = 3 if when == "after" and write.trash_slot in write.changed_rows else 0
            z.append(kinds)
            text.append(["" if v == 0 else "ctx" if v < 0 else str(int(v)) for v in row])
            y.append(f"request {b}, {when}")
    return _category_map(z, x, y, CACHE_KINDS, CACHE_COLORS, text=text,
                         hover="%{y}, position %{x}: %{text}<extra></extra>",
                         xtitle="position in the request's cache block (cells: the draft row that wrote it, + 1)",
                         title="the drafter's KV cache before and after one pass: slot −1 writes land in the trash row",
                         height=200 + 45 * len(y))


def slot_inputs_figure(slots) -> go.Figure:
    """``Input_i = embed(token_i) ⊕ h_i`` for one request's slots (``mechanics.slot_inputs``).

    Two rows of cells, the embedding half and the hidden half of each slot's input,
    coloured by slot kind; ``fig.data[0].text`` holds the labels.
    """
    kinds = ("context", "bonus", "mask", "padding")
    z = [[kinds.index(s.kind) for s in slots]] * 2
    text = [[s.embed_label for s in slots], [s.hidden_label for s in slots]]
    x = [f"slot {s.slot}<br>pos {s.position}<br>{s.kind}" for s in slots]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=["embed(token)  ⊕", "h (after fc)"], text=text, texttemplate="%{text}",
                               zmin=0, zmax=3, showscale=False, xgap=3, ygap=3,
                               colorscale=[[i / 3, KIND_COLORS[k]] for i, k in enumerate(kinds)],
                               hovertemplate="%{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title="Input_i = embed(token_i) ⊕ h_i, slot by slot (h_shared = fc(mask_hidden))",
                      height=280, margin=dict(t=70, b=80))
    return fig


MASK_KEY_KINDS = ("hidden", "visible: context cached earlier", "visible: written by this pass")
MASK_KEY_COLORS = {"hidden": "#FFFFFF", "visible: context cached earlier": "#C7C7C7",
                   "visible: written by this pass": "#F58518"}


def inference_mask_figure(mask) -> go.Figure:
    """One request's drafter attention at inference: slots (rows) × cache positions (columns)."""
    z = [[(2 if mask.key_kind[p] == "this pass" else 1) if v else 0 for p, v in enumerate(row)]
         for row in mask.visible.tolist()]
    y = [f"slot {i} ({k}, pos {p})" for i, (k, p) in enumerate(zip(mask.kinds, mask.positions))]
    x = [str(p) for p in range(len(mask.key_kind))]
    return _category_map(z, x, y, MASK_KEY_KINDS, MASK_KEY_COLORS, hover="%{y} → key at position %{x}<extra></extra>",
                         xtitle="key: position in the request's cache block",
                         title="the drafter's attention at inference: causal by position over the cache",
                         height=260 + 30 * len(y))

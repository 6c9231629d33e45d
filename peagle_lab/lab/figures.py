"""Plotly figures for the walkthrough notebooks, each a pure function of a result object.

| figure                     | from                                   | notebook |
| -------------------------- | -------------------------------------- | -------- |
| ``draft_batch_figure``     | ``DraftInputs`` (slot grid)            | 1, 2     |
| ``draft_batch_table``      | ``DraftInputs`` (one row per slot)     | 2        |
| ``draft_hidden_figure``    | ``fill_draft_hidden`` output           | 2        |
| ``taps_figure``            | target taps ``[T, 3H]``                | 1        |
| ``step_timeline``          | ``StepTrace`` per method               | 1        |
| ``verify_outcome_figure``  | ``VerifyResult`` and the drafts        | 1        |
| ``acceptance_figure``      | predicted and measured AL per K        | 1        |
| ``kernel_benchmark_figure``| ``docs/results/*/kernels.json``        | 4        |
| ``cod_elements_figure``    | COD ``Elements`` (depth × anchor)      | 3        |
| ``chain_mask_figure``      | the training attention mask            | 3        |
| ``segments_figure``        | sequence-partitioning ``Segment``s     | 3        |
| ``partition_sizes_figure`` | segment sizes per S (+ GPU memory)     | 3        |
| ``training_curves_figure`` | ``Trainer`` ``on_step`` metrics        | 6        |
| ``acceptance_reports_figure`` | per-position acceptance per head    | 6        |
| ``learning_curve_figure``  | a training session's ``results.json``  | 6        |
| ``acceptance_vs_k_figure`` | AL per K per head (``results.json``)   | 6        |
| ``k_scaling_figure``       | a K sweep's ``bench.json`` rows         | results  |

``figure_mime_bundle`` turns a figure into raw display data (for in-place updates).

The benchmark figures of the throughput sweep live in ``peagle_lab.bench.plots``; these two are the
only modules that import plotly. Nothing here computes a result: figures only draw.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import plotly.graph_objects as go
import plotly.io as pio
import torch

from ..engine import StepTrace
from ..kernels.prepare_draft_inputs import DraftInputs
from .layout import SLOT_KINDS, describe_draft_batch
from ..verify import VerifyResult
from .walkthrough import median_step

__all__ = ["figure_mime_bundle", "KIND_COLORS", "OUTCOME_COLORS", "draft_batch_figure", "draft_batch_table", "draft_hidden_figure",
           "taps_figure", "step_timeline", "verify_outcome_figure", "acceptance_figure",
           "kernel_benchmark_figure"]

KIND_COLORS = {"context": "#4C78A8", "bonus": "#F58518", "mask": "#B279A2", "padding": "#E0E0E0"}
OUTCOME_KINDS = ("accepted", "rejected", "recovered", "bonus", "discarded")
OUTCOME_COLORS = {"accepted": "#54A24B", "rejected": "#E45756", "recovered": "#4C78A8",
                  "bonus": "#F58518", "discarded": "#E0E0E0"}
PART_COLORS = {"verify": "#4C78A8", "prep": "#72B7B2", "draft": "#F58518"}
DEPTH_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D")

TokenText = Callable[[int], str] | None


def figure_mime_bundle(fig: go.Figure) -> dict:
    """The figure's display data as a raw bundle, for ``display(..., raw=True, display_id=...)``.

    A plotly figure handed to ``display`` renders itself through ``_ipython_display_`` and so
    ignores ``display_id``; a raw bundle keeps in-place updates working. The notebook's default
    renderer decides the bundle; the plain plotly mimetype where none is set (outside Jupyter).
    """
    bundle = fig._repr_mimebundle_()
    if not bundle:
        bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    return {**bundle, "text/plain": f"<plotly figure: {fig.layout.title.text or 'untitled'}>"}


def _label(token: int, token_text: TokenText) -> str:
    return str(token) if token_text is None else repr(token_text(token))


def _categorical(z: list[list[int]], names: Sequence[str], colors: Mapping[str, str], text, hover, **kw) -> go.Heatmap:
    """A heatmap whose integer cells index ``names``, one flat colour per category."""
    n = len(names)
    scale = []
    for i, name in enumerate(names):
        scale += [[i / n, colors[name]], [(i + 1) / n, colors[name]]]
    return go.Heatmap(z=z, zmin=-0.5, zmax=n - 0.5, colorscale=scale, showscale=False, text=text,
                      texttemplate="%{text}", hovertext=hover, hoverinfo="text", xgap=2, ygap=2, **kw)


def _legend(fig: go.Figure, names: Sequence[str], colors: Mapping[str, str]) -> None:
    """Legend entries for a categorical heatmap (invisible points, one per category)."""
    for name in names:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(size=12, symbol="square", color=colors[name])))


def draft_batch_figure(inputs: DraftInputs, *, token_text: TokenText = None, title: str | None = None,
                       last_slots: int | None = None) -> go.Figure:
    """The drafter batch as a grid: one row per request, one cell per slot, coloured by kind.

    Each cell shows the slot's token and position; hovering shows its hidden-state source,
    KV slot and whether it is masked or sampled. ``fig.data[0]`` is the heatmap; its ``z``
    holds indices into ``SLOT_KINDS`` and its ``x`` the slot indices shown. A prefill batch
    has one slot per prompt token: ``last_slots`` keeps only the last slots of each row.
    """
    c, R = inputs.num_requests, inputs.rows_per_request
    first = max(R - last_slots, 0) if last_slots else 0
    shown = R - first
    z = [[0] * shown for _ in range(c)]
    text = [[""] * shown for _ in range(c)]
    hover = [[""] * shown for _ in range(c)]
    for s in describe_draft_batch(inputs):
        if s.slot < first:
            continue
        b, i = s.request, s.slot - first
        z[b][i] = SLOT_KINDS.index(s.kind)
        tok = "MASK" if s.kind == "mask" else ("·" if s.kind == "padding" else _label(s.token, token_text))
        text[b][i] = f"{tok}<br>p{s.position}"
        hover[b][i] = (f"row {s.row} (request {s.request}, slot {s.slot})<br>kind: {s.kind}"
                       f"<br>token: {s.token}<br>hidden: {s.hidden_label}<br>position: {s.position}"
                       f"<br>kv slot: {s.slot_mapping}<br>masked: {s.is_masked}<br>sampled: {s.sampled}")
    fig = go.Figure(_categorical(z, SLOT_KINDS, KIND_COLORS, text, hover,
                                 x=list(range(first, R)), y=[f"request {b}" for b in range(c)]))
    _legend(fig, SLOT_KINDS, KIND_COLORS)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title=f"slot{f' (the last {shown} of {R})' if first else ''}; hover a cell for details",
                     dtick=1, showgrid=False, zeroline=False)
    fig.update_layout(title=title or f"drafter batch: c={c}, R={R} slots per request", height=190 + 60 * c,
                      margin=dict(l=90, r=20, t=90, b=50), plot_bgcolor="white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return fig


def draft_batch_table(inputs: DraftInputs, *, token_text: TokenText = None) -> go.Figure:
    """One table row per slot: token, hidden-state source, position, KV slot, masked, sampled."""
    rows = describe_draft_batch(inputs)
    cols = {
        "row": [s.row for s in rows], "request": [s.request for s in rows], "slot": [s.slot for s in rows],
        "kind": [s.kind for s in rows], "token": [_label(s.token, token_text) for s in rows],
        "hidden source": [s.hidden_label for s in rows], "position": [s.position for s in rows],
        "kv slot": [s.slot_mapping for s in rows], "masked": [s.is_masked for s in rows],
        "sampled": [s.sampled for s in rows],
    }
    fill = [KIND_COLORS[s.kind] + "55" for s in rows]  # the kind colour, translucent
    fig = go.Figure(go.Table(header=dict(values=list(cols), align="left"),
                             cells=dict(values=list(cols.values()), fill_color=[fill] * len(cols), align="left")))
    fig.update_layout(height=80 + 24 * len(rows), margin=dict(l=10, r=10, t=10, b=10))
    return fig


def draft_hidden_figure(hidden: torch.Tensor, inputs: DraftInputs) -> go.Figure:
    """The drafter's hidden-state input ``[c*R, H]`` as a heatmap, rows labelled by slot kind."""
    rows = describe_draft_batch(inputs)
    labels = [f"{s.request}/{s.slot} {s.kind}: {s.hidden_label}" for s in rows]
    fig = go.Figure(go.Heatmap(z=hidden.detach().float().cpu().tolist(), y=labels, colorscale="RdBu",
                               zmid=0, colorbar=dict(title="value")))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title="hidden-state input per slot", xaxis_title="hidden dimension",
                      height=120 + 22 * len(rows), margin=dict(l=260, r=20, t=50, b=40))
    return fig


def taps_figure(taps: torch.Tensor, aux_layer_ids: Sequence[int], *, tokens: Sequence[int] | None = None,
                token_text: TokenText = None) -> go.Figure:
    """RMS of each tap per token: what the drafter sees of the target, layer by layer.

    Args:
        taps: one request's taps, ``[T, len(aux_layer_ids) * H]``.
        tokens / token_text: the T token ids and a decoder, to label the x axis.
    """
    T, width = taps.shape
    n = len(aux_layer_ids)
    per_layer = taps.detach().float().cpu().view(T, n, width // n)  # (T, taps, H)
    rms = per_layer.pow(2).mean(-1).sqrt().T  # (taps, T)
    # The position prefix keeps repeated tokens apart on a categorical axis.
    x = [f"{i} {_label(t, token_text)}" for i, t in enumerate(tokens)] if tokens is not None else list(range(T))
    # log10: the first token (an attention sink) is orders of magnitude larger than the rest.
    fig = go.Figure(go.Heatmap(z=rms.clamp_min(1e-6).log10().tolist(), x=x, y=[f"layer {k}" for k in aux_layer_ids],
                               customdata=rms.tolist(), hovertemplate="%{y}, token %{x}: RMS %{customdata:.2f}<extra></extra>",
                               colorscale="Viridis", colorbar=dict(title="log10 RMS")))
    fig.update_layout(title=f"taps: the residual stream entering layers {tuple(aux_layer_ids)} "
                            f"(concatenated to {width} = {n}×{width // n})",
                      height=320, margin=dict(l=80, r=20, t=60, b=100))
    return fig


def _as_step(trace: StepTrace | Sequence[StepTrace]) -> StepTrace:
    return trace if isinstance(trace, StepTrace) else median_step(list(trace))


def step_timeline(traces: Mapping[str, StepTrace | Sequence[StepTrace]], *, device: str = "") -> go.Figure:
    """One decode step per method as a horizontal timeline: verify, draft-batch prep, drafter passes.

    A list of steps is summarised by ``walkthrough.median_step``. The drafter time is split
    evenly over its passes (K for EAGLE-3, one for P-EAGLE), since the trace times them together.
    Traces: "verify", "prep" and "draft"; each bar's ``base`` is its start in milliseconds.
    """
    parts: dict[str, tuple[list, list, list, list]] = {p: ([], [], [], []) for p in PART_COLORS}
    for method, trace in traces.items():
        s = _as_step(trace)
        spans = [("verify", "target verify pass", s.verify_ms), ("prep", "draft-batch prep", s.prep_ms)]
        passes = max(s.drafter_forwards, 1)
        spans += [("draft", f"drafter pass {i + 1}/{passes}", s.draft_ms / passes) for i in range(passes)]
        start = 0.0
        for part, label, ms in spans:
            y, base, x, hover = parts[part]
            y.append(method)
            base.append(start)
            x.append(ms)
            hover.append(f"{method}: {label}, {ms:.2f} ms")
            start += ms
    fig = go.Figure()
    for part, (y, base, x, hover) in parts.items():
        fig.add_trace(go.Bar(name=part, y=y, x=x, base=base, orientation="h", hovertext=hover,
                             hoverinfo="text", marker=dict(color=PART_COLORS[part], line=dict(color="white", width=1))))
    fig.update_layout(barmode="overlay", title=f"one decode step{' on ' + device if device else ''}",
                      xaxis_title="milliseconds from the start of the step", height=140 + 50 * len(traces),
                      margin=dict(l=80, r=20, t=50, b=50))
    fig.update_yaxes(autorange="reversed")
    return fig


def verify_outcome_figure(result: VerifyResult, drafts: torch.Tensor, *, token_text: TokenText = None) -> go.Figure:
    """Per request, what greedy verification did with each of the K drafts and the extra slot.

    Draft slots are accepted, the first one that differs is rejected, later ones are
    discarded unchecked; the extra token is the recovered one (after a rejection) or the bonus
    one (all K accepted). ``fig.data[0].z`` indexes ``OUTCOME_KINDS``.
    """
    n_acc = result.num_accepted.tolist()
    out = result.output_tokens.tolist()
    dr = drafts.tolist()
    c, K = len(dr), len(dr[0])
    z, text = [], []
    for b in range(c):
        n = n_acc[b]
        kinds = ["accepted"] * n + (["rejected"] + ["discarded"] * (K - n - 1) if n < K else [])
        tokens = dr[b][:]
        z_row = [OUTCOME_KINDS.index(k) for k in kinds]
        t_row = [_label(t, token_text) for t in tokens]
        z_row.append(OUTCOME_KINDS.index("bonus" if n == K else "recovered"))
        t_row.append(_label(out[b][n], token_text))
        z.append(z_row)
        text.append(t_row)
    hover = [[f"request {b}, {'draft ' + str(i) if i < K else 'extra slot'}: {OUTCOME_KINDS[z[b][i]]} {text[b][i]}"
              for i in range(K + 1)] for b in range(c)]
    fig = go.Figure(_categorical(z, OUTCOME_KINDS, OUTCOME_COLORS, text, hover,
                                 x=[f"draft {i}" for i in range(K)] + ["new token"],
                                 y=[f"request {b} (accepted {n_acc[b]})" for b in range(c)]))
    _legend(fig, OUTCOME_KINDS, OUTCOME_COLORS)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title="greedy verification: each draft against the target's own choice",
                      height=170 + 60 * c, margin=dict(l=160, r=20, t=90, b=40), plot_bgcolor="white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return fig


def acceptance_figure(ks: Sequence[int], predicted: Sequence[float], measured: Sequence[float] | None = None,
                      *, title: str = "acceptance length vs K") -> go.Figure:
    """Acceptance length per K: a predicted curve and (optionally) measured points."""
    fig = go.Figure(go.Scatter(x=list(ks), y=list(predicted), mode="lines+markers", name="predicted"))
    if measured is not None:
        fig.add_trace(go.Scatter(x=list(ks), y=list(measured), mode="markers", name="measured",
                                 marker=dict(size=10, symbol="x")))
    fig.update_layout(title=title, xaxis_title="K (draft tokens per step)",
                      yaxis_title="acceptance length (tokens per step)", height=360)
    return fig


def kernel_benchmark_figure(results: Mapping, *, dtype: str = "bf16", mode: str = "graph") -> go.Figure:
    """Fused Triton vs PyTorch reference draft-batch construction, µs per call, per (c, K).

    Args:
        results: the parsed ``kernels.json`` written by ``scripts/bench/bench_kernels.py``.
        dtype: "fp32" | "bf16". mode: "graph" (CUDA-graph replay) | "eager".
    """
    rows = [r for r in results["rows"] if r["dtype"] == dtype]
    if not rows:
        raise ValueError(f"no rows with dtype={dtype!r}; have {sorted({r['dtype'] for r in results['rows']})}")
    x = [f"c={r['c']}, K={r['K']}" for r in rows]
    fig = go.Figure()
    slowest = 0.0
    for name, key, launches, color in (("PyTorch reference", "reference", "reference_launches", "#9D9D9D"),
                                       ("fused Triton", "fused", "fused_launches", "#F58518")):
        us = [r[f"{key}_{mode}_us"] for r in rows]
        slowest = max(slowest, *us)
        fig.add_trace(go.Bar(name=name, x=x, y=us, marker_color=color,
                             text=[f"{v:.1f} µs<br>{r[launches]} launches" for v, r in zip(us, rows)],
                             textposition="outside"))
    fig.update_layout(barmode="group", yaxis_type="log", yaxis_title="median µs per call (log scale)",
                      title=f"draft-batch construction on {results.get('device', '?')}, {dtype}, {mode} "
                            f"(torch {results.get('torch', '?')}, triton {results.get('triton', '?')})",
                      height=420, margin=dict(l=60, r=20, t=60, b=60))
    fig.update_yaxes(range=[0, math.log10(slowest) + 0.4])  # bars start at 1 µs; room for the labels
    return fig


# =====================================================================================
# Training figures (notebooks 3 and 6): COD elements, the chain mask, segments, curves
# =====================================================================================

ELEMENT_KINDS = ("not sampled", "no loss", "loss")
ELEMENT_COLORS = {"not sampled": "#FFFFFF", "no loss": "#C7C7C7", "loss": "#4C78A8"}


def _element_grid(elements, members=None) -> tuple[list[list[int]], int, int]:
    """(depth × anchor) grid of ELEMENT_KINDS indices; ``members`` limits it to those element indices."""
    anchors = elements.anchor.tolist()
    depths = elements.depth.tolist()
    loss = elements.has_loss.tolist()
    A, D = (max(anchors) + 1 if anchors else 0), (max(depths) + 1 if depths else 0)
    z = [[0] * A for _ in range(D)]
    for i in (range(len(anchors)) if members is None else members):
        z[depths[i]][anchors[i]] = 2 if loss[i] else 1
    return z, A, D


def cod_elements_figure(elements, *, title: str | None = None) -> go.Figure:
    """The COD-sampled training elements of one sequence: depth (rows) × anchor (columns).

    Blue elements carry a loss (their target token is an assistant token), grey ones are
    context only, white ones were not sampled. ``fig.data[0].z`` indexes ``ELEMENT_KINDS``.
    """
    z, A, D = _element_grid(elements)
    counts = elements.counts()
    fig = go.Figure(_categorical(z, ELEMENT_KINDS, ELEMENT_COLORS, None, None, x=list(range(A)),
                                 y=[f"depth {d} ({counts[d]})" for d in range(D)]))
    fig.data[0].update(hovertemplate="anchor %{x}, %{y}<extra></extra>", texttemplate=None)
    _legend(fig, ELEMENT_KINDS[1:], ELEMENT_COLORS)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="anchor a (depth d predicts token a + d + 2)", dtick=max(1, A // 24))
    fig.update_layout(title=title or f"COD: {len(elements)} elements over {D} depths", height=160 + 36 * D,
                      plot_bgcolor="#F4F4F4", margin=dict(l=110, r=20, t=90, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return fig


def chain_mask_figure(visible: torch.Tensor, elements) -> go.Figure:
    """The training attention mask ``[N, N]`` (query rows, key columns), labelled a{anchor}d{depth}."""
    labels = [f"a{a}d{d}" for a, d in zip(elements.anchor.tolist(), elements.depth.tolist())]
    fig = go.Figure(go.Heatmap(z=visible.int().tolist(), x=labels, y=labels, colorscale=[[0, "#FFFFFF"], [1, "#4C78A8"]],
                               showscale=False, xgap=1, ygap=1,
                               hovertemplate="query %{y} → key %{x}: %{z}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="query", tickfont=dict(size=9))
    fig.update_xaxes(title="key", tickfont=dict(size=9), side="top")
    n = len(labels)
    fig.update_layout(title="who may attend to whom (blue: visible)", height=min(260 + 14 * n, 900),
                      width=min(300 + 14 * n, 1000), margin=dict(l=80, r=20, t=110, b=20))
    return fig


def segments_figure(elements, segments) -> go.Figure:
    """One panel per segment of sequence partitioning: its own elements and the context it recomputes.

    In segment s, blue elements are its own (anchors in [lo, hi), with loss), grey ones the
    depth-0 context of earlier anchors it recomputes without loss.
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(segments), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[f"segment {i}: anchors [{s.lo}, {s.hi}), {len(s.index)} elements, "
                                        f"{int((~s.has_loss).sum())} without loss" for i, s in enumerate(segments)])
    for i, s in enumerate(segments):
        z, A, D = _element_grid(elements, s.index.tolist())
        # Elements a segment computes without loss are context (grey), whatever they carry elsewhere.
        for j, own in zip(s.index.tolist(), s.has_loss.tolist()):
            if not own:
                z[int(elements.depth[j])][int(elements.anchor[j])] = 1
        heat = _categorical(z, ELEMENT_KINDS, ELEMENT_COLORS, None, None, x=list(range(A)),
                            y=[f"d{d}" for d in range(D)])
        heat.update(hovertemplate=f"segment {i}: anchor %{{x}}, %{{y}}<extra></extra>", texttemplate=None)
        fig.add_trace(heat, row=i + 1, col=1)
        fig.update_yaxes(autorange="reversed", row=i + 1, col=1)
    fig.update_xaxes(title="anchor", row=len(segments), col=1)
    fig.update_layout(title="sequence partitioning: what each segment computes", plot_bgcolor="#F4F4F4",
                      height=120 + 30 * len(segments) * (int(elements.depth.max()) + 2), margin=dict(l=50, r=20, t=80, b=50))
    return fig


def partition_sizes_figure(sizes: Mapping[int, Mapping[str, int]], memory: Mapping | None = None) -> go.Figure:
    """Largest segment and total rows computed per S; with ``memory``, the measured peak GPU memory.

    Args:
        sizes: ``{S: {"largest": elements, "computed": elements}}`` (``train_walkthrough.partition_sizes``).
        memory: a parsed ``train_memory.json`` (``scripts/bench/bench_train_memory.py``), or None.
    """
    from plotly.subplots import make_subplots

    S = sorted(sizes)
    fig = make_subplots(specs=[[{"secondary_y": memory is not None}]])
    fig.add_trace(go.Bar(x=[str(s) for s in S], y=[sizes[s]["largest"] for s in S], name="largest segment (elements)",
                         marker_color="#4C78A8"))
    fig.add_trace(go.Bar(x=[str(s) for s in S], y=[sizes[s]["computed"] for s in S], name="elements computed in all",
                         marker_color="#C7C7C7"))
    if memory is not None:
        rows = sorted((r for r in memory["results"] if not r.get("oom")), key=lambda r: r["segments"])
        fig.add_trace(go.Scatter(x=[str(r["segments"]) for r in rows], y=[r["peak_allocated_gib"] for r in rows],
                                 mode="lines+markers", name=f"peak memory on {memory.get('device', '?')} (GiB)",
                                 line=dict(color="#F58518")), secondary_y=True)
        fig.update_yaxes(title="GiB", secondary_y=True, rangemode="tozero")
    fig.update_xaxes(title="segments S")
    fig.update_yaxes(title="drafter rows (attention is quadratic in the largest)", secondary_y=False)
    fig.update_layout(barmode="group", title="partitioning: smaller passes, a little recomputation", height=380)
    return fig


def training_curves_figure(history: Sequence[Mapping], *, title: str = "training") -> go.Figure:
    """Loss and per-depth top-1 agreement against step, from ``Trainer`` ``on_step`` metrics."""
    from plotly.subplots import make_subplots

    steps = [m["step"] for m in history]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss (soft cross-entropy vs the target)",
                                                        "top-1 agreement with the target, by depth"))
    fig.add_trace(go.Scatter(x=steps, y=[m["loss"] for m in history], mode="lines", name="loss",
                             line=dict(color="#4C78A8")), row=1, col=1)
    depths = max((len(m["depth_acc"]) for m in history), default=0)
    for d in range(depths):
        fig.add_trace(go.Scatter(x=steps, y=[m["depth_acc"][d] if len(m["depth_acc"]) > d else None for m in history],
                                 mode="lines", name=f"depth {d}", opacity=0.8), row=1, col=2)
    fig.update_xaxes(title="step")
    fig.update_yaxes(range=[0, 1], row=1, col=2)
    fig.update_layout(title=title, height=360)
    return fig


def acceptance_reports_figure(reports: Mapping[str, Sequence], k: int) -> go.Figure:
    """Per-position acceptance at K = ``k`` for several heads (``evaluate_acceptance`` reports)."""
    fig = go.Figure()
    for label, rs in reports.items():
        r = next((r for r in rs if r.k == k), None)
        if r is None:
            continue
        fig.add_trace(go.Scatter(x=list(range(1, k + 1)), y=list(r.per_position_acceptance), mode="lines+markers",
                                 name=f"{label}: AL {r.acceptance_length:.2f}"))
    fig.update_xaxes(title="draft position", dtick=1)
    fig.update_yaxes(title="accepted at this position / drafts", range=[0, 1])
    fig.update_layout(title=f"held-out acceptance at K={k} (temperature 0, the real engine)", height=360)
    return fig


def _layers(head: Mapping) -> str:
    n = head["num_hidden_layers"]
    return f"{n} layer" if n == 1 else f"{n} layers"


def learning_curve_figure(results: Mapping) -> go.Figure:
    """Held-out top-1 agreement per depth against target tokens trained on, one panel per head.

    ``results`` is a training session's ``results.json`` (``peagle_lab.train.report``): its
    heads' ``curve`` points, taken every few hundred steps on the same held-out rows.
    """
    from plotly.subplots import make_subplots

    heads = results["heads"]
    fig = make_subplots(rows=1, cols=len(heads), shared_yaxes=True,
                        subplot_titles=[f"{name} ({_layers(h)})" for name, h in heads.items()])
    for col, h in enumerate(heads.values(), start=1):
        curve = h["curve"]
        x = [p["tokens"] / 1e6 for p in curve]
        for d in range(max((len(p["depth_acc"]) for p in curve), default=0)):
            fig.add_trace(go.Scatter(x=x, y=[p["depth_acc"][d] for p in curve], mode="lines+markers",
                                     name=f"depth {d}", legendgroup=f"d{d}", showlegend=col == 1,
                                     line=dict(color=DEPTH_COLORS[d % len(DEPTH_COLORS)])), row=1, col=col)
        fig.update_xaxes(title="target tokens trained on (millions)", row=1, col=col)
    fig.update_yaxes(title="held-out top-1 agreement with the target", range=[0, 1], row=1, col=1)
    fig.update_layout(title="learning curves (teacher-forced, held-out rows)", height=380)
    return fig


def acceptance_vs_k_figure(results: Mapping, workload: str | None = None) -> go.Figure:
    """Acceptance length against K for each head: the K-scaling picture, from ``results.json``.

    Args:
        results: a training session's results document.
        workload: None for the held-out prompts, else a benchmark workload name ("chat", "code").
    """
    fig = go.Figure()
    for name, h in results["heads"].items():
        acc = h["acceptance"] if workload is None else h["workloads"].get(workload, {})
        ks = sorted(acc, key=int)
        fig.add_trace(go.Scatter(x=[int(k) for k in ks], y=[acc[k]["AL"] for k in ks], mode="lines+markers",
                                 name=f"{name} ({_layers(h)})"))
    fig.update_xaxes(title="K (draft tokens per step)", dtick=1)
    fig.update_yaxes(title="acceptance length (tokens per step)", rangemode="tozero")
    where = "held-out prompts" if workload is None else f"the {workload} workload"
    fig.update_layout(title=f"acceptance length vs K on {where} (temperature 0)", height=360)
    return fig


METHOD_COLORS = {"baseline": "#9D9D9D", "eagle3": "#4C78A8", "peagle": "#F58518"}
METHOD_NAMES = {"baseline": "plain decoding", "eagle3": "EAGLE-3", "peagle": "P-EAGLE"}


def k_scaling_figure(bench: Mapping, workload: str = "chat", concurrencies: Sequence[int] = (1, 64)) -> go.Figure:
    """Tokens/s and drafting time against K, per method, one column per concurrency.

    The top row is throughput (plain decoding as a dashed line), the bottom row the drafter's
    time per step: EAGLE-3 pays one drafter pass per draft token, P-EAGLE one pass for all K.

    Args:
        bench: a ``bench.json`` document (``peagle-lab bench``) whose rows sweep K (the full sweep's
            ``docs/results/h200/sweeps/2026-12-03-d0f394e/bench.json`` does at c = 1 and 64); reference rows are left out.
        workload: the workload to draw.
        concurrencies: the columns.
    """
    from plotly.subplots import make_subplots

    rows = [r for r in bench["rows"] if r["workload"] == workload and r["temperature"] == 0
            and r.get("source", "peagle_lab") == "peagle_lab"]  # a full sweep also holds transformers' reference
    if not rows:
        raise ValueError(f"no temperature-0 rows for workload {workload!r} in this bench document")
    fig = make_subplots(rows=2, cols=len(concurrencies), shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"{workload}, c={c}" for c in concurrencies])
    for col, c in enumerate(concurrencies, start=1):
        for method in ("eagle3", "peagle"):
            mine = sorted((r for r in rows if r["method"] == method and r["concurrency"] == c), key=lambda r: r["k"])
            ks = [r["k"] for r in mine]
            style = dict(color=METHOD_COLORS[method])
            hover = [f"K={r['k']}: AL {r['acceptance_length']:.2f}" for r in mine]
            fig.add_trace(go.Scatter(x=ks, y=[r["tps"] for r in mine], mode="lines+markers", line=style, text=hover,
                                     name=METHOD_NAMES[method], legendgroup=method, showlegend=col == 1),
                          row=1, col=col)
            fig.add_trace(go.Scatter(x=ks, y=[r["draft_ms"] for r in mine], mode="lines+markers", line=style,
                                     name=METHOD_NAMES[method], legendgroup=method, showlegend=False),
                          row=2, col=col)
        plain = [r["tps"] for r in rows if r["method"] == "baseline" and r["concurrency"] == c]
        if plain:
            fig.add_hline(y=plain[0], line=dict(color=METHOD_COLORS["baseline"], dash="dash"),
                          annotation_text="plain decoding", row=1, col=col)
        fig.update_xaxes(title="K (draft tokens per step)", dtick=1, row=2, col=col)
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title="output tokens/s", row=1, col=1)
    fig.update_yaxes(title="drafting ms per step", row=2, col=1)
    device = (bench.get("run_info") or {}).get("device", "")
    fig.update_layout(title=f"K scaling on {device or 'the device'}: throughput and drafting time", height=560)
    return fig


def engines_figure(doc: Mapping, workload: str = "chat", concurrencies: Sequence[int] = (1, 64)) -> go.Figure:
    """Tokens/s of each method and K in vLLM and in our engine, one column per concurrency.

    Args:
        doc: a ``peagle-lab vllm-compare`` document (rows with ``engine`` = vllm | peagle_lab).
        workload: the workload to draw.
        concurrencies: the columns.
    """
    from plotly.subplots import make_subplots

    rows = [r for r in doc["rows"] if r["workload"] == workload]
    engines = [e for e in ("vllm", "peagle_lab") if any(r["engine"] == e for r in rows)]
    if not engines:
        raise ValueError(f"no rows for workload {workload!r} in this vllm-compare document")
    missing = [c for c in concurrencies if not any(r["concurrency"] == c for r in rows)]
    if missing:
        raise ValueError(f"concurrencies {missing} are not in this document (it has "
                         f"{sorted({r['concurrency'] for r in rows})})")
    fig = make_subplots(rows=1, cols=len(concurrencies), subplot_titles=[f"{workload}, c={c}" for c in concurrencies])
    colors = {"vllm": "#7f7f7f", "peagle_lab": "#1f77b4"}
    for col, c in enumerate(concurrencies, start=1):
        for engine in engines:
            mine = sorted((r for r in rows if r["engine"] == engine and r["concurrency"] == c),
                          key=lambda r: (("baseline", "eagle3", "peagle").index(r["method"]), r["k"]))
            names = [f"{METHOD_NAMES[r['method']]} K={r['k']}" if r["k"] else METHOD_NAMES[r["method"]] for r in mine]
            hover = [f"AL {r['acceptance_length']:.2f}" + (f", step {r['step_ms']:.2f} ms" if r.get("step_ms") else "")
                     for r in mine]
            fig.add_trace(go.Bar(x=names, y=[r["tps"] for r in mine], name=engine, legendgroup=engine,
                                 marker_color=colors[engine], hovertext=hover, showlegend=col == 1), row=1, col=col)
    fig.update_yaxes(title="output tokens/s", row=1, col=1)
    device = (doc.get("run_info") or {}).get("device", "")
    fig.update_layout(title=f"vLLM and peagle_lab on {device or 'one device'}, same heads and prompts",
                      barmode="group", height=420)
    return fig

"""The baseline's strength as an experiment: P-EAGLE's lead over EAGLE-3 heads trained deep or shallow.

EAGLE-3 learns to draft from its own outputs through a *training-time test* (TTT): each training step unrolls
the drafter ``k_train`` times, feeding back its own hidden state, so the head sees at training time the
inputs it meets at depth. The shipped EAGLE-3 head unrolls 7 steps. A head trained with fewer (3) meets
its own drafts at positions 4 to 8 untrained, so its acceptance falls faster with depth, and P-EAGLE's lead
at large K grows. ``scripts/gpu/baseline_depth_session.sh`` trains such a head and evaluates it beside the
shipped EAGLE-3 and P-EAGLE heads on the same prompts; this module reads that session.

| function             | what it gives                                                                |
| -------------------- | ---------------------------------------------------------------------------- |
| ``load_session``     | a fetched session's ``results.json``, ``experiment.json`` and ``bench.json``   |
| ``head_labels``      | each head named by method, TTT depth and whether it is the shipped one       |
| ``position_rows``    | acceptance at positions 1..8 (K = 8) per head and workload                   |
| ``al_rows``          | acceptance length per K per head and workload                                |
| ``lead_rows``        | P-EAGLE's AL minus each EAGLE-3 head's at K = 3 and 7                        |
| ``best_k_rows``      | each method's best K by measured TPS at c = 64 (the shallow head: estimated) |
| ``acceptance_figure``| acceptance by position, one line per head, one panel per workload (plotly)   |
| ``depth_gaps``       | the shallow head's conditional acceptance minus the deep one's, per position |
| ``lead_change``      | P-EAGLE's lead over the shallow head minus its lead over the deep one        |

Its text (the notebook's printouts, every table as markdown, the command line) is
:mod:`peagle_lab.lab.baseline_depth_report`::

    python -m peagle_lab.lab.baseline_depth_report FOLDER [--figure acceptance.html]

FOLDER holds ``train/results.json`` (and optionally ``train/experiment.json`` and ``answer_c64/bench.json``),
the session's ``train.tgz`` and ``answer_c64.tgz`` unpacked. Only ``acceptance_figure`` needs plotly.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..heads import HEADS_DIR
from ..train.report import conditional_acceptance

__all__ = ["load_session", "head_labels", "position_rows", "al_rows", "lead_rows", "best_k_rows",
           "acceptance_figure", "depth_gaps", "lead_change"]

HELD_OUT = "held-out"  # the evaluation's own prompts (the data's held-out split); other workloads keep their names
LEAD_KS = (3, 7)


def load_session(folder: Path | str) -> dict:
    """``{"results", "experiment", "bench"}`` of a session folder (the last two None when absent).

    Raises:
        FileNotFoundError: no ``train/results.json`` (or ``results.json``) under ``folder``.
    """
    folder = Path(folder)
    found = [p for p in (folder / "train" / "results.json", folder / "results.json") if p.is_file()]
    if not found:
        raise FileNotFoundError(f"{folder}: no train/results.json (unpack the session's train.tgz there)")
    results = json.loads(found[0].read_text())
    if not results.get("heads"):
        raise ValueError(f"{found[0]}: no heads (expected a train_heads_h200.sh results.json)")
    exp = found[0].parent / "experiment.json"
    bench = folder / "answer_c64" / "bench.json"
    return {"results": results, "experiment": json.loads(exp.read_text()) if exp.is_file() else None,
            "bench": json.loads(bench.read_text()) if bench.is_file() else None}


def _shipped_commands(heads_dir: Path = HEADS_DIR) -> dict[str, str]:
    """{command: method} of the shipped heads' ``summary.json`` (a head evaluated again keeps its command)."""
    out = {}
    for p in sorted(Path(heads_dir).glob("*/summary.json")):
        s = json.loads(p.read_text())
        if s.get("command"):
            out[s["command"]] = s.get("method")
    return out


def head_labels(results: Mapping, shipped: set[str] | None = None, heads_dir: Path = HEADS_DIR) -> dict[str, str]:
    """``{head name: label}``, P-EAGLE first, then EAGLE-3 heads from the deepest TTT down.

    Args:
        results: a session's ``results.json``.
        shipped: names of the heads that are the shipped ones (the session's ``experiment.json`` lists them);
            None: the heads whose training command equals a shipped head's ``summary.json`` (in ``heads_dir``).

    >>> r = {"heads": {"a": {"method": "eagle3", "config": {"k_train": 3}},
    ...                "b": {"method": "peagle", "config": {"k_train": 8}}}}
    >>> head_labels(r, shipped={"b"})
    {'b': 'P-EAGLE (shipped)', 'a': 'EAGLE-3, TTT 3'}
    """
    commands = _shipped_commands(heads_dir) if shipped is None else {}
    labels = {}
    for name, h in results["heads"].items():
        k = (h.get("config") or {}).get("k_train")
        base = "P-EAGLE" if h.get("method") == "peagle" else f"EAGLE-3, TTT {k}"
        is_shipped = name in shipped if shipped is not None else h.get("command") in commands
        labels[name] = base + (" (shipped)" if is_shipped else "")
    order = sorted(labels, key=lambda n: (results["heads"][n].get("method") != "peagle",
                                          -((results["heads"][n].get("config") or {}).get("k_train") or 0), n))
    return {n: labels[n] for n in order}


def _by_k(table: Mapping) -> dict[int, dict]:
    return {int(k): v for k, v in (table or {}).items()}


def _workloads(head: Mapping) -> dict[str, dict[int, dict]]:
    """``{workload: {K: {"AL", "per_position", ...}}}`` of one head, the held-out prompts first."""
    return {HELD_OUT: _by_k(head.get("acceptance")), **{w: _by_k(t) for w, t in (head.get("workloads") or {}).items()}}


def position_rows(results: Mapping, labels: Mapping[str, str] | None = None, k: int | None = None) -> list[dict]:
    """Acceptance by position at the largest measured K (or ``k``), one row per (workload, head).

    Per-position acceptance is vLLM's: drafts accepted at position i over all drafts, so it falls with i.
    ``labels``: ``head_labels``' output (default: computed from ``results``).
    """
    labels = labels or head_labels(results)
    rows = []
    for name, label in labels.items():
        for w, by_k in _workloads(results["heads"][name]).items():
            kk = k if k is not None else max(by_k, default=None)
            if kk in by_k:
                rows.append({"workload": w, "head": label, "k": kk, "per_position": list(by_k[kk]["per_position"])})
    return sorted(rows, key=lambda r: list(_workloads_order(results)).index(r["workload"]))


def _workloads_order(results: Mapping) -> dict[str, None]:
    return {w: None for h in results["heads"].values() for w in _workloads(h)}


def al_rows(results: Mapping, labels: Mapping[str, str] | None = None) -> list[dict]:
    """``{"workload", "head", "AL": {K: AL}}`` for every head and workload."""
    labels = labels or head_labels(results)
    return [{"workload": w, "head": labels[n], "AL": {k: v["AL"] for k, v in sorted(by_k.items())}}
            for w in _workloads_order(results) for n in labels
            for by_k in [_workloads(results["heads"][n]).get(w, {})] if by_k]


def lead_rows(results: Mapping, labels: Mapping[str, str] | None = None, ks: Sequence[int] = LEAD_KS) -> list[dict]:
    """P-EAGLE's AL lead over each EAGLE-3 head at each of ``ks``, per workload (None where unmeasured).

    The lead is P-EAGLE's AL minus EAGLE-3's, and ``ratio`` P-EAGLE's over EAGLE-3's.
    """
    labels = labels or head_labels(results)
    heads = results["heads"]
    pe = [n for n in labels if heads[n].get("method") == "peagle"]
    if not pe:
        return []
    p_al = {w: {k: v["AL"] for k, v in t.items()} for w, t in _workloads(heads[pe[0]]).items()}
    rows = []
    for n in (n for n in labels if heads[n].get("method") == "eagle3"):
        for w, t in _workloads(heads[n]).items():
            for k in ks:
                p, e = p_al.get(w, {}).get(k), (t.get(k) or {}).get("AL")
                rows.append({"workload": w, "eagle3": labels[n], "k": k, "peagle_AL": p, "eagle3_AL": e,
                             "lead": None if p is None or e is None else p - e,
                             "ratio": None if p is None or not e else p / e})
    return rows


def _bench_tps(bench: Mapping, workload: str, concurrency: int | None) -> tuple[int | None, dict[str, dict[int, dict]]]:
    """The concurrency read (``concurrency``, else the largest there) and ``{method: {K: row}}`` of a bench.json's
    own cells on ``workload`` (baseline under K = 0)."""
    rows = [r for r in bench.get("rows", []) if r.get("source", "peagle_lab") == "peagle_lab" and r["workload"] == workload]
    c = concurrency if concurrency is not None else max((r["concurrency"] for r in rows), default=None)
    out: dict[str, dict[int, dict]] = {}
    for r in rows:
        if r["concurrency"] == c:
            out.setdefault(r["method"], {})[int(r["k"])] = r
    return c, out


def best_k_rows(session: Mapping, workload: str = "code", concurrency: int | None = None) -> list[dict]:
    """Each method's best K by TPS in the answer-length benchmark (the shipped heads), and the shallow head's.

    ``concurrency``: the benchmark's column read (default: its largest c, 64 in the session); every row says its ``c``.

    The benchmark runs the shipped heads only. A head of the same architecture and draft vocabulary costs the same
    per step, so its TPS at K is estimated as the shipped EAGLE-3's measured TPS times the two heads' AL ratio on
    the same prompts (the evaluation's ``workload``); such rows say ``"estimated": True``.
    """
    bench = session.get("bench")
    if not bench:
        return []
    c, cells = _bench_tps(bench, workload, concurrency)
    names = {"baseline": "plain decoding", "eagle3": "EAGLE-3, TTT 7 (shipped)", "peagle": "P-EAGLE (shipped)"}
    rows = []
    for m, by_k in cells.items():
        k = max(by_k, key=lambda k: (by_k[k]["tps"], -k))
        rows.append({"method": names.get(m, m), "k": k, "tps": by_k[k]["tps"], "c": c,
                     "AL": by_k[k]["acceptance_length"], "estimated": False, "ks": sorted(by_k)})
    results = session["results"]
    labels = head_labels(results, shipped=shipped_names(session))
    heads = results["heads"]
    e3 = [n for n in labels if heads[n].get("method") == "eagle3"]
    ref = next((n for n in e3 if "(shipped)" in labels[n]), None)
    if ref is None or "eagle3" not in cells:
        return rows
    w = workload if workload in _workloads(heads[ref]) else HELD_OUT
    ref_al = {k: v["AL"] for k, v in _workloads(heads[ref])[w].items()}
    for n in (n for n in e3 if n != ref):
        al = {k: v["AL"] for k, v in _workloads(heads[n]).get(w, {}).items()}
        ratio = {k: al[k] / ref_al[k] for k in cells["eagle3"] if k in al and ref_al.get(k)}
        if ratio:
            k = max(ratio, key=lambda k: (cells["eagle3"][k]["tps"] * ratio[k], -k))
            r = cells["eagle3"][k]
            rows.append({"method": labels[n], "k": k, "tps": r["tps"] * ratio[k], "c": c,
                         "AL": r["acceptance_length"] * ratio[k], "estimated": True, "ks": sorted(ratio)})
    return rows


def shipped_names(session: Mapping) -> set[str] | None:
    exp = session.get("experiment") or {}
    return set(exp["shipped_heads"]) if exp.get("shipped_heads") else None


def acceptance_figure(rows: Sequence[Mapping], *, title: str = "Acceptance by position"):
    """Acceptance at each position, one line per head, one panel per workload (``position_rows`` output).

    Needs plotly (imported here, so the tables above run where it is not installed).
    """
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    heads = list(dict.fromkeys(r["head"] for r in rows))
    colors = ("#F58518", "#4C78A8", "#9ECAE9", "#54A24B", "#E45756", "#B279A2")
    fig = make_subplots(rows=1, cols=max(1, len(workloads)), shared_yaxes=True, subplot_titles=workloads)
    for col, w in enumerate(workloads, start=1):
        for r in (r for r in rows if r["workload"] == w):
            i = heads.index(r["head"])
            pos = r["per_position"]
            fig.add_trace(go.Scatter(x=list(range(1, len(pos) + 1)), y=pos, mode="lines+markers", name=r["head"],
                                     legendgroup=r["head"], showlegend=col == 1,
                                     line=dict(color=colors[i % len(colors)], dash="dot" if "TTT 3" in r["head"] else None),
                                     hovertemplate=f"{r['head']}<br>position %{{x}}: %{{y:.3f}}<extra></extra>"),
                          row=1, col=col)
        fig.update_xaxes(title_text="draft position", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text="accepted / drafts", rangemode="tozero", row=1, col=1)
    fig.update_layout(height=400, title=title)
    return fig


def deep_and_shallow(results: Mapping, labels: Mapping[str, str]) -> tuple[str, str] | None:
    """The deepest- and the shallowest-trained EAGLE-3 heads' names (``labels`` orders them deepest first)."""
    e3 = [n for n in labels if results["heads"][n].get("method") == "eagle3"]
    return (e3[0], e3[-1]) if len(e3) >= 2 else None


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def depth_gaps(results: Mapping, labels: Mapping[str, str] | None = None) -> list[dict]:
    """Per workload: the shallow EAGLE-3 head's conditional acceptance minus the deep one's at each position (K = 8),
    and the mean gap at the positions its TTT covers (1..k_train, ``inside``) and past them (``past``).

    A head meets its own drafts at depth; past its TTT depth it meets them untrained, so ``past`` < ``inside``.
    """
    labels = labels or head_labels(results)
    pair = deep_and_shallow(results, labels)
    if pair is None:
        return []
    ttt = (results["heads"][pair[1]].get("config") or {}).get("k_train") or 0
    cond = {(r["workload"], r["head"]): conditional_acceptance(r["per_position"]) for r in position_rows(results, labels)}
    rows = []
    for w in _workloads_order(results):
        deep, shallow = cond.get((w, labels[pair[0]])), cond.get((w, labels[pair[1]]))
        if deep and shallow:
            gap = [None if a is None or b is None else b - a for a, b in zip(deep, shallow)]
            inside, past = ([g for g in part if g is not None] for part in (gap[:ttt], gap[ttt:]))
            rows.append({"workload": w, "deep": labels[pair[0]], "shallow": labels[pair[1]], "ttt": ttt,
                         "gap": gap, "inside": _mean(inside), "past": _mean(past)})
    return rows


def lead_change(results: Mapping, labels: Mapping[str, str] | None = None, ks: Sequence[int] = LEAD_KS) -> list[dict]:
    """Per (workload, K): P-EAGLE's AL lead over the deep and over the shallow EAGLE-3 head, and ``change``,
    the second minus the first (> 0: the shallow baseline raises P-EAGLE's lead); ``ratio``: P-EAGLE's AL over
    the shallow head's."""
    labels = labels or head_labels(results)
    pair = deep_and_shallow(results, labels)
    if pair is None:
        return []
    at = {(r["workload"], r["k"], r["eagle3"]): r for r in lead_rows(results, labels, ks)}
    rows = []
    for w, k in dict.fromkeys((w, k) for w, k, _ in at):
        deep, shallow = at.get((w, k, labels[pair[0]]), {}), at.get((w, k, labels[pair[1]]), {})
        if deep.get("lead") is not None and shallow.get("lead") is not None:
            rows.append({"workload": w, "k": k, "deep": deep["lead"], "shallow": shallow["lead"],
                         "change": shallow["lead"] - deep["lead"], "ratio": shallow["ratio"]})
    return rows

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
| ``heads_text``       | the session's heads and data, as notebook 8 prints them                      |
| ``conditional_text`` | conditional acceptance per position and workload, with ``depth_gaps``        |
| ``lead_text``        | the leads, their change, the paper's lead and the c = 64 benchmark's Ks       |

Usage::

    python -m peagle_lab.lab.baseline_depth FOLDER [--figure acceptance.html]

FOLDER holds ``train/results.json`` (and optionally ``train/experiment.json`` and ``answer_c64/bench.json``),
the session's ``train.tgz`` and ``answer_c64.tgz`` unpacked. Only ``acceptance_figure`` needs plotly.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..heads import HEADS_DIR
from ..train.report import conditional_acceptance
from .paper import HUMANEVAL_AL

__all__ = ["load_session", "head_labels", "position_rows", "al_rows", "lead_rows", "best_k_rows",
           "acceptance_figure", "depth_gaps", "lead_change", "heads_text", "conditional_text", "lead_text", "report"]

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
    labels = head_labels(results, shipped=_shipped_names(session))
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


def _shipped_names(session: Mapping) -> set[str] | None:
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


def _deep_and_shallow(results: Mapping, labels: Mapping[str, str]) -> tuple[str, str] | None:
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
    pair = _deep_and_shallow(results, labels)
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
    pair = _deep_and_shallow(results, labels)
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


def heads_text(session: Mapping) -> str:
    """The session's heads (label; for a head it trained: steps, tokens, warm start) and its data."""
    results, exp = session["results"], session.get("experiment") or {}
    lines = []
    for n, label in head_labels(results, shipped=_shipped_names(session)).items():
        h = results["heads"][n]
        warm = ", warm-started from the shipped EAGLE-3" if h.get("warm_start") == exp.get("shipped_eagle3") else ""
        lines.append(label if "(shipped)" in label else
                     f"{label}: {h.get('steps')} steps on {h.get('tokens', 0) / 1e6:.1f} M tokens{warm}")
    return "\n".join(lines + ([f"data: {exp['data']}"] if exp.get("data") else []))


def conditional_text(session: Mapping) -> str:
    """Each head's conditional acceptance per position and workload, the shallow head's gap to the deep one."""
    results = session["results"]
    labels = head_labels(results, shipped=_shipped_names(session))
    rows = position_rows(results, labels)
    lines = ["acceptance at position i once position i - 1 was accepted (K = 8)"]
    for g in depth_gaps(results, labels):
        w = g["workload"]
        lines.append(f"{w:<26} " + " ".join(f"{'p' + str(i):>6}" for i in range(1, len(g["gap"]) + 1)))
        for r in (r for r in rows if r["workload"] == w):
            lines.append(f"  {r['head']:<24} " + " ".join(f"{_fmt(v):>6}" for v in conditional_acceptance(r["per_position"])))
        lines.append(f"  {g['shallow'].split(', ')[-1] + ' minus ' + g['deep'].split(', ')[-1].split(' (')[0]:<24} " + " ".join(f"{_fmt(v, '+.3f'):>6}" for v in g["gap"]))
        lines.append(f"  mean gap at positions 1-{g['ttt']} {_fmt(g['inside'], '+.3f')}, "
                     f"past position {g['ttt']} {_fmt(g['past'], '+.3f')}")
    return "\n".join(lines)


def lead_text(session: Mapping, k: int = max(LEAD_KS)) -> str:
    """P-EAGLE's lead over each EAGLE-3 head, how much the shallow head changes it, the widest ratio at ``k`` beside
    the paper's (HumanEval), and what the c = 64 answer benchmark measured of each method."""
    results = session["results"]
    labels = head_labels(results, shipped=_shipped_names(session))
    change = lead_change(results, labels)
    if not change:
        return "no pair of EAGLE-3 heads of two TTT depths in this session"
    deep, shallow = (labels[n] for n in _deep_and_shallow(results, labels))
    lines = ["P-EAGLE's AL lead (its AL minus each EAGLE-3 head's); the last column: the second lead minus the first",
             f"{'workload':<10}{'K':>3}  {'over ' + deep:>32}  {'over ' + shallow:>22}  {'change':>7}"]
    lines += [f"{r['workload']:<10}{r['k']:>3}  {r['deep']:>+32.3f}  {r['shallow']:>+22.3f}  {r['change']:>+7.3f}"
              for r in change]
    ttt = (results["heads"][_deep_and_shallow(results, labels)[1]].get("config") or {}).get("k_train") or 0
    for kk in dict.fromkeys(r["k"] for r in change):
        at = [r for r in change if r["k"] == kk]
        verb = "raises P-EAGLE's lead" if all(r["change"] > 0 for r in at) else "changes P-EAGLE's lead"
        lines.append(f"K = {kk} ({'inside' if kk <= ttt else 'past'} its TTT depth): the {shallow} head {verb} by "
                     + ", ".join(f"{r['change']:+.3f} ({r['workload']})" for r in at))
    widest = max((r for r in change if r["k"] == k and r["ratio"]), key=lambda r: r["ratio"], default=None)
    if widest:
        paper = HUMANEVAL_AL[("peagle", k)] / HUMANEVAL_AL[("eagle3", k)]
        lines.append(f"P-EAGLE's AL over the {shallow} head's at K = {k}, widest on {widest['workload']}: "
                     f"{widest['ratio']:.2f}x; the paper's P-EAGLE over its EAGLE-3 (HumanEval): {paper:.2f}x")
        al = {(r["eagle3"], r["k"]): r["eagle3_AL"] for r in lead_rows(results, labels) if r["workload"] == widest["workload"]}
        lines.append(f"EAGLE-3's AL gain from K = 3 to {k} on {widest['workload']}: " + ", ".join(
            f"{e} {al[e, k] - al[e, 3]:+.3f}" for e in (deep, shallow) if al.get((e, k)) and al.get((e, 3)))
            + f"; the paper's EAGLE-3 (HumanEval) {HUMANEVAL_AL[('eagle3', k)] - HUMANEVAL_AL[('eagle3', 3)]:+.3f}")
    return "\n".join(lines + _c64_lines(session))


def _c64_lines(session: Mapping) -> list[str]:
    """The c = 64 answer benchmark's Ks per measured method, and whether a P-EAGLE ÷ EAGLE-3 ratio follows."""
    best = [r for r in best_k_rows(session) if not r["estimated"] and r["k"]]  # the speculative methods measured
    if not best:
        return []
    ks = {r["method"]: r["ks"] for r in best}
    out = [f"HumanEval answers at c = {best[0]['c']}, batched continuously: "
           + "; ".join(f"{m} measured at K {min(k)}-{max(k)}" if len(k) > 1 else f"{m} at K {k[0]} only"
                       for m, k in ks.items())]
    if len({len(k) for k in ks.values()}) > 1:
        out.append("  the methods ran at different Ks, so no P-EAGLE ÷ EAGLE-3 ratio at this c follows from this run")
    return out


def _fmt(v, spec: str = ".3f") -> str:
    return "—" if v is None else format(v, spec)


def _table(header: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in r) + " |" for r in rows), ""]


def _heads_table(results: Mapping, labels: Mapping[str, str]) -> list[str]:
    rows = []
    for n, label in labels.items():
        h = results["heads"][n]
        cfg = h.get("config") or {}
        rows.append([label, n, cfg.get("k_train", "—"), h.get("steps", "—"), _fmt(h.get("cumulative_tokens"), ".3g"),
                     h.get("warm_start") or "—"])
    return _table(["head", "run", "k_train", "steps (last run)", "tokens (all runs)", "warm start"], rows)


def _lead_table(rows: Sequence[Mapping]) -> list[str]:
    """``lead_rows`` as one line per (workload, K): P-EAGLE's AL, then each EAGLE-3 head's AL and the lead."""
    e3 = list(dict.fromkeys(r["eagle3"] for r in rows))
    keys = list(dict.fromkeys((r["workload"], r["k"]) for r in rows))
    at = {(r["workload"], r["k"], r["eagle3"]): r for r in rows}
    body = []
    for w, k in keys:
        line = [w, k, _fmt(at[w, k, e3[0]]["peagle_AL"])]
        for e in e3:
            r = at.get((w, k, e)) or {}
            line += [_fmt(r.get("eagle3_AL")), _fmt(r.get("lead"), "+.3f")
                     + (f" ({r['ratio']:.2f}×)" if r.get("ratio") else "")]
        body.append(line)
    header = ["workload", "K", "P-EAGLE AL", *(h for e in e3 for h in (f"{e} AL", f"lead over {e}"))]
    return ["## P-EAGLE's lead over each EAGLE-3 head (AL, P-EAGLE minus EAGLE-3)", "", *_table(header, body)]


def report(session: Mapping) -> str:
    """Every table of a session as markdown: heads, acceptance by position, AL per K, the lead, best K."""
    results = session["results"]
    labels = head_labels(results, shipped=_shipped_names(session))
    lines = ["# The baseline's strength: P-EAGLE beside EAGLE-3 heads of two TTT depths", ""]
    exp = session.get("experiment") or {}
    if exp.get("data"):
        lines += [f"Data: {exp['data']}.", ""]
    lines += ["## Heads", "", *_heads_table(results, labels)]
    pos = position_rows(results, labels)
    width = max((len(r["per_position"]) for r in pos), default=0)
    lines += ["## Acceptance by position (drafts accepted at position i / drafts)", "",
              *_table(["workload", "head", "K", *(f"p{i}" for i in range(1, width + 1))],
                      [[r["workload"], r["head"], r["k"], *(_fmt(v) for v in r["per_position"])] for r in pos])]
    lines += ["## Acceptance at position i once position i - 1 was accepted", "",
              "Where a head trained with a shallow TTT meets its own drafts untrained, this rate drops.", "",
              *_table(["workload", "head", *(f"p{i}" for i in range(1, width + 1))],
                      [[r["workload"], r["head"], *(_fmt(v) for v in conditional_acceptance(r["per_position"]))]
                       for r in pos])]
    als = al_rows(results, labels)
    ks = sorted({k for r in als for k in r["AL"]})
    lines += ["## Acceptance length per K", "",
              *_table(["workload", "head", *(f"K={k}" for k in ks)],
                      [[r["workload"], r["head"], *(_fmt(r["AL"].get(k)) for k in ks)] for r in als])]
    lines += _lead_table(lead_rows(results, labels))
    best = best_k_rows(session)
    if best:
        lines += [f"## Best K by TPS: HumanEval answers to EOS, c = {best[0]['c']}, continuous batching", "",
                  *_table(["method", "best K", "tok/s", "AL", "how"],
                          [[r["method"], r["k"] or "—", _fmt(r["tps"], ".0f"), _fmt(r["AL"]), _how(r, best)]
                           for r in best])]
    return "\n".join(lines)


def _how(row: Mapping, rows: Sequence[Mapping]) -> str:
    """How a best-K row was found; a method measured at fewer K than the others says which (a stage cut short
    leaves its best K a lower bound, not a peak).

    >>> _how({"estimated": False, "ks": [1]}, [{"ks": [1, 2, 3]}, {"ks": [1]}])
    'measured at K 1 only (the others at K 1-3): a lower bound'
    """
    how = "estimated (shipped EAGLE-3's TPS × AL ratio)" if row["estimated"] else "measured"
    widest = max((r.get("ks") or [] for r in rows), key=len)
    ks = row.get("ks") or []
    if ks and 0 not in ks and len(ks) < len(widest):
        how += f" at K {', '.join(map(str, ks))} only (the others at K {widest[0]}-{widest[-1]}): a lower bound"
    return how


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m peagle_lab.lab.baseline_depth", description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a fetched baseline_depth_session.sh folder (train/results.json inside)")
    p.add_argument("--figure", help="also write the acceptance-by-position figure to this HTML file (needs plotly)")
    args = p.parse_args(argv)
    session = load_session(args.folder)
    print(report(session))
    if args.figure:
        labels = head_labels(session["results"], shipped=_shipped_names(session))
        acceptance_figure(position_rows(session["results"], labels)).write_html(args.figure, include_plotlyjs="cdn")
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())

"""The baseline-depth session as text: what notebook 8 prints and ``python -m peagle_lab.lab.baseline_depth_report``.

:mod:`peagle_lab.lab.baseline_depth` reads a session and computes its rows; this module words them: the heads
(``heads_text``), conditional acceptance past the shallow head's training depth (``conditional_text``), P-EAGLE's lead
over each EAGLE-3 head (``lead_text``) and every table as markdown (``report``).

| function             | what it gives                                                                |
| -------------------- | ---------------------------------------------------------------------------- |
| ``heads_text``       | the session's heads and data, as notebook 8 prints them                      |
| ``conditional_text`` | conditional acceptance per position and workload, with ``depth_gaps``        |
| ``lead_text``        | the leads, their change, the paper's lead and the c = 64 benchmark's Ks      |
| ``report``           | every table of a session as markdown                                         |

Usage::

    python -m peagle_lab.lab.baseline_depth_report FOLDER [--figure acceptance.html]

FOLDER holds ``train/results.json`` (and optionally ``train/experiment.json`` and ``answer_c64/bench.json``),
the session's ``train.tgz`` and ``answer_c64.tgz`` unpacked. Only ``--figure`` needs plotly.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from ..train.report import conditional_acceptance
from .baseline_depth import (
    LEAD_KS, deep_and_shallow, shipped_names, acceptance_figure, al_rows, best_k_rows, depth_gaps, head_labels,
    lead_change, lead_rows, load_session, position_rows)
from .paper import HUMANEVAL_AL

__all__ = ["heads_text", "conditional_text", "lead_text", "report", "main"]


def heads_text(session: Mapping) -> str:
    """The session's heads (label; for a head it trained: steps, tokens, warm start) and its data."""
    results, exp = session["results"], session.get("experiment") or {}
    lines = []
    for n, label in head_labels(results, shipped=shipped_names(session)).items():
        h = results["heads"][n]
        warm = ", warm-started from the shipped EAGLE-3" if h.get("warm_start") == exp.get("shipped_eagle3") else ""
        lines.append(label if "(shipped)" in label else
                     f"{label}: {h.get('steps')} steps on {h.get('tokens', 0) / 1e6:.1f} M tokens{warm}")
    return "\n".join(lines + ([f"data: {exp['data']}"] if exp.get("data") else []))


def conditional_text(session: Mapping) -> str:
    """Each head's conditional acceptance per position and workload, the shallow head's gap to the deep one."""
    results = session["results"]
    labels = head_labels(results, shipped=shipped_names(session))
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


def lead_text(session: Mapping, k: int = max(LEAD_KS), c64: bool = True) -> str:
    """P-EAGLE's lead over each EAGLE-3 head, how much the shallow head changes it, the widest ratio at ``k`` beside
    the paper's (HumanEval), and (``c64``) what the session's c = 64 answer benchmark measured of each method."""
    results = session["results"]
    labels = head_labels(results, shipped=shipped_names(session))
    change = lead_change(results, labels)
    if not change:
        return "no pair of EAGLE-3 heads of two TTT depths in this session"
    deep, shallow = (labels[n] for n in deep_and_shallow(results, labels))
    lines = ["AL from this experiment's own evaluation (its train/results.json: every head on the same prompts), not "
             "from the answer-length sweep",
             "P-EAGLE's AL lead (its AL minus each EAGLE-3 head's); the last column: the second lead minus the first",
             f"{'workload':<10}{'K':>3}  {'over ' + deep:>32}  {'over ' + shallow:>22}  {'change':>7}"]
    lines += [f"{r['workload']:<10}{r['k']:>3}  {r['deep']:>+32.3f}  {r['shallow']:>+22.3f}  {r['change']:>+7.3f}"
              for r in change]
    ttt = (results["heads"][deep_and_shallow(results, labels)[1]].get("config") or {}).get("k_train") or 0
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
    return "\n".join(lines + (_c64_lines(session) if c64 else []))


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
    labels = head_labels(results, shipped=shipped_names(session))
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
    p = argparse.ArgumentParser(prog="python -m peagle_lab.lab.baseline_depth_report", description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a fetched baseline_depth_session.sh folder (train/results.json inside)")
    p.add_argument("--figure", help="also write the acceptance-by-position figure to this HTML file (needs plotly)")
    args = p.parse_args(argv)
    session = load_session(args.folder)
    print(report(session))
    if args.figure:
        labels = head_labels(session["results"], shipped=shipped_names(session))
        acceptance_figure(position_rows(session["results"], labels)).write_html(args.figure, include_plotlyjs="cdn")
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())

"""Reporting a sweep: the headline text table, the goals, and an offline HTML report.

The text parts need nothing beyond the standard library (they run on the H200, where
plotly is absent); ``write_report`` imports the figures from ``peagle_lab.bench.plots`` and so
needs plotly. Rebuild a report from a result file anywhere with
``python -m peagle_lab.bench.report RESULT.json [--out report.html]``.
"""
from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path

from .analysis import best_k, check_goals, ratios
from .schema import BenchResult, read_json

LABELS = {"baseline": "plain", "eagle3": "EAGLE-3", "peagle": "P-EAGLE"}


def headline_rows(result: BenchResult) -> list[dict]:
    """One dict per (workload, temperature, c): best-K TPS and AL per method, and the ratios."""
    best = best_k(result.rows)
    pe = {(r.workload, r.temperature, r.concurrency): r.ratio for r in ratios(result.rows, "peagle", "eagle3")}
    pb = {(r.workload, r.temperature, r.concurrency): r.ratio for r in ratios(result.rows, "peagle", "baseline")}
    order = list(dict.fromkeys(w for w, _, _, _ in best))  # workloads in sweep order
    keys = sorted({(w, t, c) for (w, t, _, c) in best}, key=lambda k: (order.index(k[0]), k[1], k[2]))
    out = []
    for w, t, c in keys:
        d = {"workload": w, "temperature": t, "concurrency": c,
             "peagle/eagle3": pe.get((w, t, c)), "peagle/baseline": pb.get((w, t, c))}
        for m in LABELS:
            r = best.get((w, t, m, c))
            d[m] = None if r is None else {"tps": r.tps, "k": r.k, "al": r.acceptance_length}
        out.append(d)
    return out


def _cell(d: dict | None, with_k: bool = True) -> str:
    if d is None:
        return "—"
    return f"{d['tps']:.0f} (K={d['k']}, AL {d['al']:.2f})" if with_k and d["k"] else f"{d['tps']:.0f}"


def headline_table(result: BenchResult) -> str:
    """A fixed-width text table: best-K TPS per method and the P-EAGLE ratios, per workload and c."""
    lines = [f"{'workload':<8} {'T':>4} {'c':>4}  {'plain tok/s':>11}  {'EAGLE-3 tok/s':>24}  "
             f"{'P-EAGLE tok/s':>24}  {'P/E3':>5}  {'P/plain':>7}"]
    for d in headline_rows(result):
        ratio = lambda v: f"{v:.2f}×" if v is not None else "—"  # noqa: E731
        lines.append(f"{d['workload']:<8} {d['temperature']:>4g} {d['concurrency']:>4}  {_cell(d['baseline']):>11}  "
                     f"{_cell(d['eagle3']):>24}  {_cell(d['peagle']):>24}  {ratio(d['peagle/eagle3']):>5}  "
                     f"{ratio(d['peagle/baseline']):>7}")
    for r in (r for r in result.rows if r.source == "transformers"):
        agree = f", {100 * r.agreement:.0f}% tokens equal to ours" if r.agreement is not None else ""
        lines.append(f"reference: transformers static cache, {r.workload}, c={r.concurrency}: {r.tps:.0f} tok/s, "
                     f"TPOT {r.tpot_ms:.2f} ms{agree}")
    return "\n".join(lines)


def goals_table(result: BenchResult) -> str:
    """The goals as text lines: PASS / MISS / n/a, measured vs target, and the evidence."""
    out = []
    for g in check_goals(result):
        status = {True: "PASS", False: "MISS", None: "n/a "}[g.passed]
        out.append(f"[{status}] {g.name}: {g.value()} (goal {g.bound}) — {g.detail}")
    return "\n".join(out)


# ---------------------------------------------------------------- HTML

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.pass{color:#17803d}.miss{color:#b3261e}.na{color:#777}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:0.5em 1em}code{background:#f3f3f3}"""


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    th = "".join(f"<th class='l'>{h}</th>" if i < left else f"<th>{h}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td class='l'>{v}</td>" if i < left else f"<td>{v}</td>"
                                    for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _figures(result: BenchResult) -> list:
    from . import plots as viz

    if not result.rows:
        return []
    workloads = list(dict.fromkeys(r.workload for r in result.rows if r.source == "peagle_lab"))
    figs = [viz.bench_tps_vs_concurrency(result, w) for w in workloads]
    figs += [viz.bench_speedup(result), viz.bench_speedup(result, "peagle", "baseline"),
             viz.bench_acceptance_length_vs_k(result), viz.bench_per_position_acceptance(result)]
    figs += [viz.bench_step_time_split(result, w) for w in workloads]
    return figs


def render_html(result: BenchResult, plotlyjs_src: str | None = "plotly.min.js") -> str:
    """The report as one HTML page; ``plotlyjs_src`` None inlines plotly.js (a ~4 MB file)."""
    esc = html.escape
    info, cfg = result.run_info, result.config
    title = f"peagle_lab bench — {esc(str(info.get('device')))}"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{_CSS}</style>"]
    if plotlyjs_src is None:
        import plotly.offline

        parts.append(f"<script>{plotly.offline.get_plotlyjs()}</script>")
    else:
        parts.append(f"<script src='{esc(plotlyjs_src)}'></script>")
    parts.append("</head><body><h1>P-EAGLE vs EAGLE-3 vs plain decoding</h1>")
    parts.append(_table(["run", ""], [[esc(k), f"<code>{esc(str(v))}</code>"] for k, v in info.items()]))
    heads = cfg.get("heads", {})
    if heads:
        parts.append(_table(["method", "head"], [[esc(m), esc(str(o))] for m, o in heads.items()]))
    if any("random" in str(o) for o in heads.values()):
        parts.append("<p class='warn'>Some heads are <b>random (untrained)</b>: they draft noise, so AL≈1 and "
                     "speculation cannot pay off. These numbers measure step costs, not the method.</p>")
    if result.skipped:
        parts.append(f"<p class='warn'>{len(result.skipped)} planned cells did not run; see the list at the end.</p>")
    parts.append("<h2>Goals (ratios measured in this run)</h2>")
    goal_rows = []
    for g in check_goals(result):
        cls, word = {True: ("pass", "PASS"), False: ("miss", "MISS"), None: ("na", "n/a")}[g.passed]
        goal_rows.append([esc(g.name), f"<span class='{cls}'>{word}</span>",
                          g.value(), g.bound, esc(g.detail)])
    parts.append(_table(["goal", "status", "measured", "target", "evidence"], goal_rows))
    parts.append("<h2>Headline: each method at its best K</h2>")
    ratio = lambda v: "—" if v is None else f"{v:.2f}×"  # noqa: E731
    hrows = [[esc(d["workload"]), f"{d['temperature']:g}", str(d["concurrency"]), _cell(d["baseline"]),
              _cell(d["eagle3"]), _cell(d["peagle"]), ratio(d["peagle/eagle3"]), ratio(d["peagle/baseline"])]
             for d in headline_rows(result)]
    parts.append(_table(["workload", "T", "c", "plain tok/s", "EAGLE-3 tok/s", "P-EAGLE tok/s", "P/E3", "P/plain"],
                        hrows))
    parts.append("<h2>Figures</h2>")
    for i, fig in enumerate(_figures(result)):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig{i}"))
    if result.skipped:
        parts.append("<h2>Skipped cells</h2>")
        parts.append(_table(["workload", "method", "K", "c", "source", "reason"],
                            [[esc(s.workload), esc(s.method), str(s.k), str(s.concurrency), esc(s.source),
                              esc(s.reason)] for s in result.skipped], left=1))
    shown = {k: v for k, v in cfg.items() if k != "prompts"}
    parts.append(f"<details><summary>configuration</summary><pre>{esc(json.dumps(shown, indent=1))}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(result: BenchResult, path: Path | str, inline_plotlyjs: bool = False) -> Path:
    """Write the HTML report; plotly.js goes beside it once (``plotly.min.js``) unless inlined."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not inline_plotlyjs:
        import plotly.offline

        js = path.parent / "plotly.min.js"
        if not js.is_file():
            js.write_text(plotly.offline.get_plotlyjs())
    path.write_text(render_html(result, None if inline_plotlyjs else "plotly.min.js"))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m peagle_lab.bench.report",
                                description="Build the HTML report (and print the tables) of a bench result file.")
    p.add_argument("result", help="a bench JSON file")
    p.add_argument("--out", help="HTML path (default: report.html beside the JSON)")
    p.add_argument("--inline-plotlyjs", action="store_true", help="embed plotly.js instead of writing it beside")
    args = p.parse_args(argv)
    try:
        result = read_json(args.result)
        out = write_report(result, args.out or Path(args.result).with_name("report.html"), args.inline_plotlyjs)
    except (ValueError, OSError) as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    print(headline_table(result))
    print(goals_table(result))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

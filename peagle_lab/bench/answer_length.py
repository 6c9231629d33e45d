"""The answer-length benchmark's goals: P-EAGLE against EAGLE-3 with answers decoded to EOS.

The session (``scripts/gpu/sweep_session_h200.sh``) writes one bench file per workload (``code``,
``mt_bench``), each with baseline, EAGLE-3 and P-EAGLE at K = 1..8 and c = 1 and 64. This module reads
them, takes each method at its own best K per (workload, c) (``analysis.best_k``) and checks:

* P-EAGLE / EAGLE-3 TPS ≥ 1.3x on code and ≥ 1.2x on MT-Bench at c = 1, ≥ 1.15x on code at c = 64 (the
  goal's line says whether the run batched c = 64 statically or continuously, as the paper's vLLM runs do);
* P-EAGLE's best K ≥ 6 at c = 1 on every workload, EAGLE-3's ≤ 4.

    python -m peagle_lab.bench.answer_length FOLDER [--json SUMMARY.json]

FOLDER holds ``code/bench.json`` and ``mt_bench/bench.json`` (either may be missing: its goals read n/a);
``scripts/dev/land_sweep.py`` also writes their rows as one ``bench.json`` beside them (``merge``). A folder
with one ``bench.json`` of both workloads (``scripts/gpu/headline_session.sh``'s continuous c = 64 run) is
read per workload from it.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from .analysis import best_k
from .report import LABELS
from .schema import BenchResult, read_json

WORKLOADS = ("code", "mt_bench")
# (workload, c, least P-EAGLE / EAGLE-3 TPS at each method's best K): the lab's goals for the paper's protocol
RATIO_GOALS = (("code", 1, 1.3), ("mt_bench", 1, 1.2), ("code", 64, 1.15))
PEAGLE_MIN_BEST_K, EAGLE3_MAX_BEST_K = 6, 4  # at c = 1, on every workload


def _best(result: BenchResult, workload: str, c: int) -> dict:
    """{method: {"k", "tps", "al"}} at each method's best K in one column of ``result``."""
    rows = [r for r in result.rows if r.workload == workload and r.concurrency == c]
    return {m: {"k": r.k, "tps": round(r.tps, 1), "al": round(r.acceptance_length, 3)}
            for (_, _, m, _), r in best_k(rows).items()}


def summarize(results: dict[str, BenchResult]) -> dict:
    """The best-K table and every goal, PASS / MISS / n/a, from ``{workload: result}``.

    Returns:
        ``{"columns": [{workload, c, best: {method: {k, tps, al}}, p_over_e3, p_over_baseline}],
        "goals": [{goal, value, status}], "runs": {workload: run_info}}``.
    """
    columns, by_key = [], {}
    for w, res in results.items():
        for c in sorted({r.concurrency for r in res.rows if r.workload == w}):
            best = _best(res, w, c)
            tps = {m: b["tps"] for m, b in best.items()}
            col = {"workload": w, "c": c, "best": best,
                   "p_over_e3": round(tps["peagle"] / tps["eagle3"], 3) if {"peagle", "eagle3"} <= set(tps) else None,
                   "p_over_baseline": round(tps["peagle"] / tps["baseline"], 3)
                   if {"peagle", "baseline"} <= set(tps) else None}
            columns.append(col)
            by_key[(w, c)] = col
    goals = []
    for w, c, least in RATIO_GOALS:
        v = (by_key.get((w, c)) or {}).get("p_over_e3")
        # c > 1 is one static batch or continuous batching (the paper's vLLM runs): the goal names which it read
        mode = "" if c == 1 or (w, c) not in by_key else \
            " (batched continuously)" if results[w].config.get("continuous") else " (static batches)"
        goals.append({"goal": f"P-EAGLE/EAGLE-3 >= {least}x, {w}, c = {c}{mode}", "value": v,
                      "status": "n/a" if v is None else "PASS" if v >= least else "MISS"})
    for w in WORKLOADS:
        best = (by_key.get((w, 1)) or {}).get("best", {})
        for m, ok, text in (("peagle", lambda k: k >= PEAGLE_MIN_BEST_K, f">= {PEAGLE_MIN_BEST_K}"),
                            ("eagle3", lambda k: k <= EAGLE3_MAX_BEST_K, f"<= {EAGLE3_MAX_BEST_K}")):
            k = best.get(m, {}).get("k")
            goals.append({"goal": f"{m} best K {text}, {w}, c = 1", "value": k,
                          "status": "n/a" if k is None else "PASS" if ok(k) else "MISS"})
    return {"columns": columns, "goals": goals, "runs": {w: res.run_info for w, res in results.items()}}


def merge(results: dict[str, BenchResult]) -> BenchResult:
    """One result with every workload's rows, for readers that take one bench file (tables, notebooks).

    ``run_info`` is the first workload's (the session sets one commit and device for all), with each
    workload's own command under ``commands``; ``config`` is the first's with ``workloads`` and ``prompts``
    joined. Raises ValueError when the results come from different commits or devices.
    """
    infos = {w: r.run_info for w, r in results.items()}
    if len({(i.get("commit"), i.get("device")) for i in infos.values()}) != 1:
        raise ValueError(f"results from different commits or devices: {infos}")
    first = next(iter(results.values()))
    run_info = {**first.run_info, "commands": {w: i.get("command") for w, i in infos.items()}}
    config = {**first.config, "workloads": [w for r in results.values() for w in r.config.get("workloads", [])],
              "prompts": {k: v for r in results.values() for k, v in r.config.get("prompts", {}).items()}}
    return BenchResult(run_info, config, [row for r in results.values() for row in r.rows],
                       [s for r in results.values() for s in r.skipped])


def load_folder(folder: Path | str) -> dict[str, BenchResult]:
    """``{workload: result}`` for each ``WORKLOAD/bench.json`` in ``folder``; where there is none, each workload's
    rows of the folder's own ``bench.json``."""
    folder = Path(folder)
    found = {w: read_json(folder / w / "bench.json") for w in WORKLOADS if (folder / w / "bench.json").is_file()}
    if found or not (folder / "bench.json").is_file():
        return found
    whole = read_json(folder / "bench.json")
    return {w: replace(whole, rows=[r for r in whole.rows if r.workload == w],
                       config={**whole.config, "workloads": [w]}) for w in WORKLOADS
            if any(r.workload == w for r in whole.rows)}


def _method_cell(method: str, best: dict) -> str:
    """``EAGLE-3 2265 tok/s (K=4, AL 3.15)``, or ``plain 991 tok/s``: plain decoding drafts nothing, so it has no K
    and its AL is always 1."""
    cell = f"{LABELS[method]} {best['tps']:.0f} tok/s"
    return cell if method == "baseline" else f"{cell} (K={best['k']}, AL {best['al']:.2f})"


def render(summary: dict) -> str:
    """The summary as plain text: one line per column (each method at its best K), then one per goal.

    >>> col = {"workload": "code", "c": 1, "p_over_e3": 1.363, "best": {
    ...     "baseline": {"k": 0, "tps": 991.2, "al": 1.0}, "eagle3": {"k": 4, "tps": 2265.3, "al": 3.151},
    ...     "peagle": {"k": 8, "tps": 3087.0, "al": 4.03}}}
    >>> print(render({"columns": [col], "goals": []}))  # doctest: +NORMALIZE_WHITESPACE
    code      c = 1   plain 991 tok/s  EAGLE-3 2265 tok/s (K=4, AL 3.15)  P-EAGLE 3087 tok/s (K=8, AL 4.03)
    P-EAGLE/EAGLE-3 1.36x
    """
    lines = []
    for col in summary["columns"]:
        b = col["best"]
        cells = "  ".join(_method_cell(m, b[m]) for m in LABELS if m in b)
        ratio = f"{col['p_over_e3']:.2f}x" if col["p_over_e3"] is not None else "—"
        lines.append(f"{col['workload']:9s} c = {col['c']:<3d} {cells}  P-EAGLE/EAGLE-3 {ratio}")
    lines += [f"[{g['status']:4s}] {g['goal']}: {g['value'] if g['value'] is not None else '—'}"
              for g in summary["goals"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="holds code/bench.json and mt_bench/bench.json")
    p.add_argument("--json", type=Path, help="also write the summary here")
    args = p.parse_args(argv)
    results = load_folder(args.folder)
    if not results:
        print(f"answer_length: no {' or '.join(f'{w}/bench.json' for w in WORKLOADS)} in {args.folder}",
              file=sys.stderr)
        return 2
    summary = summarize(results)
    print(render(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

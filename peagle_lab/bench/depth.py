"""Choose the P-EAGLE head's depth (drafter layers) by measured throughput.

A deeper P-EAGLE drafter predicts better but its one pass costs more; the right depth is the
one that decodes fastest, not the one with the best acceptance. Given one sweep result per
depth (the same cells, each head in its own run), :func:`choose_depth` takes P-EAGLE's best-K
TPS in every (workload, temperature, concurrency) column the runs share, and ranks depths by
the geometric mean over those columns (each column weighs the same, whatever its scale).

Command line (what ``scripts/gpu/depth_bench_h200.sh`` runs)::

    python -m peagle_lab.bench.depth 1=runs/d1/bench.json 2=runs/d2/bench.json --out depth_choice.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .analysis import best_k
from .schema import BenchResult, read_json


@dataclass(frozen=True)
class DepthScore:
    layers: int
    geomean_tps: float  # over the shared columns, each at P-EAGLE's best K
    columns: dict  # "workload/T/c" -> {"k": best K, "tps": ..., "acceptance_length": ...}


@dataclass(frozen=True)
class DepthChoice:
    layers: int  # the winner
    scores: list[DepthScore]  # best first
    columns: list[str]  # the columns every depth measured

    def to_dict(self) -> dict:
        return {"chosen_layers": self.layers, "columns": self.columns, "scores": [asdict(s) for s in self.scores]}


def _column(key: tuple) -> str:
    workload, temperature, _, concurrency = key
    return f"{workload}/T={temperature:g}/c={concurrency}"


def choose_depth(results: dict[int, BenchResult], method: str = "peagle") -> DepthChoice:
    """Rank depths by the geometric mean of ``method``'s best-K TPS over the shared columns.

    Ties go to the shallower head (cheaper to train and to serve).

    >>> from peagle_lab.bench.schema import BenchRow, BenchResult
    >>> def res(*cells):
    ...     return BenchResult({}, {}, [BenchRow("peagle", k, c, "chat", 0.0, tps, 1.0, 2.0, [0.5] * k, 1, 1, 1, 1, 1, 10)
    ...                             for k, c, tps in cells])
    >>> choice = choose_depth({1: res((3, 1, 300.0), (3, 64, 9000.0)), 2: res((5, 1, 330.0), (3, 64, 8800.0))})
    >>> choice.layers, [round(s.geomean_tps) for s in choice.scores]
    (2, [1704, 1643])
    """
    if not results:
        raise ValueError("choose_depth: no results given (expected {layers: BenchResult, ...})")
    best = {}
    for layers, result in results.items():
        if not isinstance(layers, int) or not 1 <= layers <= 64:
            raise ValueError(f"choose_depth: depth {layers!r} is not a layer count (expected an int in 1..64)")
        best[layers] = {_column(key): row for key, row in best_k(result.rows).items() if key[2] == method}
        if not best[layers]:
            raise ValueError(f"choose_depth: the result for {layers} layer(s) has no {method!r} rows")
    shared = sorted(set.intersection(*(set(cols) for cols in best.values())))
    if not shared:
        raise ValueError("choose_depth: the results share no (workload, temperature, concurrency) column; "
                         f"columns per depth: { {d: sorted(c) for d, c in best.items()} }")
    scores = []
    for layers, cols in best.items():
        if any(cols[c].tps <= 0 for c in shared):
            raise ValueError(f"choose_depth: {layers} layer(s) has a column with TPS ≤ 0")
        geo = math.exp(sum(math.log(cols[c].tps) for c in shared) / len(shared))
        scores.append(DepthScore(layers, geo, {c: {"k": cols[c].k, "tps": cols[c].tps,
                                                    "acceptance_length": cols[c].acceptance_length} for c in shared}))
    scores.sort(key=lambda s: (-s.geomean_tps, s.layers))
    return DepthChoice(scores[0].layers, scores, shared)


def _parse_pair(text: str) -> tuple[int, Path]:
    layers, sep, path = text.partition("=")
    if not sep or not layers.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected LAYERS=PATH/TO/bench.json, e.g. 2=runs/d2/bench.json")
    return int(layers), Path(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m peagle_lab.bench.depth", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=_parse_pair, metavar="LAYERS=BENCH_JSON")
    p.add_argument("--out", type=Path, help="write the choice as JSON here")
    args = p.parse_args(argv)
    results = {}
    for layers, path in args.results:
        if not path.is_file():
            p.error(f"{path}: no such result file (for {layers} layer(s))")
        results[layers] = read_json(path)
    try:
        choice = choose_depth(results)
    except ValueError as e:
        p.error(str(e))
    for s in choice.scores:
        cells = ", ".join(f"{c} K={v['k']} {v['tps']:.0f} tok/s AL {v['acceptance_length']:.2f}" for c, v in s.columns.items())
        print(f"{s.layers} layer(s): geometric mean {s.geomean_tps:.0f} tok/s  [{cells}]")
    print(f"chosen: {choice.layers} layer(s)")
    if args.out:
        doc = {**choice.to_dict(), "inputs": {str(d): str(p) for d, p in args.results},
               "run_info": {str(d): r.run_info for d, r in results.items()}}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

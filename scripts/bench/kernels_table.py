"""Print the kernel microbenchmark JSON as the Markdown table used in docs/kernels.md.

Usage: python scripts/bench/kernels_table.py [KERNELS_JSON]   # default: the newest docs/results/h200/kernels/ run
"""
from __future__ import annotations

import json
import sys

from peagle_lab.bench.archive import latest


def main(path: str | None = None) -> None:
    path = path or str(latest("h200", "kernels") / "kernels.json")
    d = json.load(open(path))
    print(f"{d['device']}, torch {d['torch']}, triton {d['triton']}, commit {d.get('commit')}, {d['date']}; "
          f"command: `{d['command']}`\n")
    print("| c | K | dtype | launches fused / ref | eager µs fused / ref | CUDA-graph µs fused / ref | speed-up (graph) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in d["rows"]:
        print(f"| {r['c']} | {r['K']} | {r['dtype']} | {r['fused_launches']} / {r['reference_launches']} | "
              f"{r['fused_eager_us']:.1f} / {r['reference_eager_us']:.1f} | "
              f"{r['fused_graph_us']:.2f} / {r['reference_graph_us']:.1f} | "
              f"{r['reference_graph_us'] / r['fused_graph_us']:.1f}× |")


if __name__ == "__main__":
    main(*sys.argv[1:])

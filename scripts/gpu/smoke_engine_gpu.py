"""Step-cost smoke test on CUDA: a SmolLM2-shaped random target, random heads, CUDA graphs.

Not a benchmark of speculation (random heads accept ~nothing): it measures what one decode
step of each method costs (verify / prep / draft milliseconds, and the whole step) with the
decode-step forwards compiled or eager, side by side in one run, so regressions show early
and the compile switch (``SpecConfig.compile``) is chosen by measurement.

Usage: python scripts/gpu/smoke_engine_gpu.py [--compile off on] [-c 1 64] [-k 7]
       [--methods baseline eagle3 peagle] [--peagle-layers 4] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

import torch

from peagle_lab.config import SpecConfig
from peagle_lab.drafter import random_drafter
from peagle_lab.engine import SpecDecoder
from peagle_lab.provenance import run_info
from peagle_lab.testing import random_smollm2


def measure(target, drafter, method: str, k: int, compile_mode: str, prompts, new_tokens: int) -> dict:
    """One engine: a warm-up generate (compiles and captures), then a measured one."""
    cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=new_tokens, compile=compile_mode)
    engine = SpecDecoder(target, drafter, cfg)
    t0 = time.perf_counter()
    engine.generate(prompts)
    first_s = time.perf_counter() - t0
    res = engine.generate(prompts)
    tr = res.trace[2:]
    med = lambda xs: statistics.median(xs) if xs else 0.0  # noqa: E731
    m = res.metrics
    return dict(c=len(prompts), method=method, k=0 if method == "baseline" else k, compile=compile_mode,
                step_ms=1e3 * m.decode_s / max(m.num_steps, 1), verify_ms=med([s.verify_ms for s in tr]),
                prep_ms=med([s.prep_ms for s in tr]), draft_ms=med([s.draft_ms for s in tr]),
                tps=m.tps, steps=m.num_steps, warmup_s=engine.warmup_s, first_generate_s=first_s,
                tokens=res.tokens)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile", nargs="+", default=["off", "on"], choices=["off", "on"])
    ap.add_argument("-c", "--concurrency", nargs="+", type=int, default=[1, 64])
    ap.add_argument("-k", type=int, default=7, help="K for both methods (default 7)")
    ap.add_argument("--methods", nargs="+", default=["baseline", "eagle3", "peagle"],
                    choices=["baseline", "eagle3", "peagle"])
    ap.add_argument("--peagle-layers", type=int, default=4, help="P-EAGLE drafter layers (the shipped head: 4)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("smoke_engine_gpu.py needs CUDA")
    target = random_smollm2()
    make = {"baseline": lambda: None, "eagle3": lambda: random_drafter(target, "eagle3"),
            "peagle": lambda: random_drafter(target, "peagle", args.peagle_layers)}
    heads = {m: make[m]() for m in args.methods}
    rows = []
    for c in args.concurrency:
        prompts = [[int(t) for t in torch.randint(100, 40000, (200,))] for _ in range(c)]
        for method, drafter in heads.items():
            by_mode = {}
            for mode in args.compile:
                row = measure(target, drafter, method, args.k, mode, prompts, args.new_tokens)
                by_mode[mode] = row.pop("tokens")
                rows.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
            if len(by_mode) == 2:  # bf16: compiled kernels may round differently; report, don't fail
                a, b = by_mode.values()
                same = sum(x == y for ra, rb in zip(a, b) for x, y in zip(ra, rb))
                rows[-1]["tokens_equal_to_eager"] = same / max(sum(len(r) for r in a), 1)
    if args.out:
        out = {**run_info(shlex.join(["python", *sys.argv])), "what": "decode-step cost, random weights, bf16, CUDA graphs",
               "rows": rows}
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

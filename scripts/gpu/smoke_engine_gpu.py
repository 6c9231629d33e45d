"""Step-cost smoke test on CUDA: a SmolLM2-shaped random target, random heads, CUDA graphs.

Not a benchmark of speculation (random heads accept ~nothing): it measures what one decode
step of each method costs (verify / prep / draft milliseconds) so regressions show early.
Usage: python scripts/gpu/smoke_engine_gpu.py [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from peagle_lab.config import SpecConfig
from peagle_lab.drafter import random_drafter
from peagle_lab.engine import SpecDecoder
from peagle_lab.models.llama import LlamaConfig, LlamaModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("smoke_engine_gpu.py needs CUDA")
    torch.manual_seed(0)
    target = LlamaModel(LlamaConfig()).to(device="cuda", dtype=torch.bfloat16).eval()
    rows = []
    for c in (1, 64):
        prompts = [[int(t) for t in torch.randint(100, 40000, (200,))] for _ in range(c)]
        for method, k in (("baseline", 1), ("eagle3", 5), ("peagle", 5)):
            drafter = None if method == "baseline" else random_drafter(target, method)
            engine = SpecDecoder(target, drafter, SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=64))
            engine.generate(prompts)  # capture graphs, warm up
            res = engine.generate(prompts)
            tr = res.trace[2:]
            med = lambda xs: statistics.median(xs) if xs else 0.0  # noqa: E731
            row = dict(c=c, method=method, k=k, verify_ms=med([s.verify_ms for s in tr]),
                       prep_ms=med([s.prep_ms for s in tr]), draft_ms=med([s.draft_ms for s in tr]),
                       tps=res.metrics.tps, steps=res.metrics.num_steps)
            rows.append(row)
            print(json.dumps(row))
    if args.out:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
                  open(args.out, "w"), indent=2)


if __name__ == "__main__":
    main()

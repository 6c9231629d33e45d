"""Warm prefill time of a batch of prompts on CUDA, at the benchmark's prompt lengths.

The K sweep's cells count each batch's prefill (and first draft) in their tokens/s: at c = 64 it was
17–18 ms of a chat cell's ~140 ms and 42–49 ms of a code cell's ~170 ms on the H200. This script
times ``SpecDecoder``'s plain-decoding prefill (1 new token) of c prompts whose lengths are drawn like
the workloads' (chat 39–84 tokens, code 95–333, the 64-prompt sets' ranges) on a SmolLM2-shaped
random bf16 target, warm (each shape run once before it is timed), as the median of ``--repeats``
calls. It names the attention kernels one call launched (``torch.profiler``) and whether the call
replayed a CUDA graph (c × padded width within ``PREFILL_GRAPH_TOKENS``; ``--graph-tokens`` overrides
that cap for an A/B); ``--eager-layers`` runs the layers uncompiled. Run an older tree's copy through
``PYTHONPATH`` to compare, in one job.

Usage: python scripts/gpu/prefill_batch_gpu.py [--cases chat:1 chat:64 code:8 code:64] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys

import torch
from prefill_cold_gpu import attention_kernels, timed_prefill as timed, write_doc  # beside this script

from peagle_lab.engine import forwards as engine_module  # PREFILL_GRAPH_TOKENS lives where the prefill reads it
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder, padded_prefill_width
from peagle_lab.testing import random_smollm2

LENGTHS = {"chat": (39, 84), "code": (95, 333)}  # min and max prompt tokens of the 64-prompt sets


def parse_case(text: str) -> tuple[str, int]:
    """``"code:64"`` -> ("code", 64), with a clear error for anything else."""
    name, _, c = text.partition(":")
    if name not in LENGTHS or not c.isdigit() or int(c) < 1:
        raise argparse.ArgumentTypeError(f"case {text!r}: expected WORKLOAD:C with WORKLOAD in "
                                         f"{sorted(LENGTHS)} and C a positive integer")
    return name, int(c)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=parse_case, nargs="+",
                    default=[parse_case(c) for c in ("chat:1", "chat:64", "code:1", "code:8", "code:64")])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--graph-tokens", type=int, help="override PREFILL_GRAPH_TOKENS (the graphed-prefill cap)")
    ap.add_argument("--eager-layers", action="store_true",
                    help="run the prefill's layers uncompiled (SpecDecoder.compile_prefill = False)")
    ap.add_argument("--label", default="", help="a name for this tree in the JSON (e.g. a commit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("prefill_batch_gpu.py: needs CUDA", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print(f"prefill_batch_gpu.py: --repeats {args.repeats}: expected at least 1", file=sys.stderr)
        return 2
    if args.graph_tokens is not None:
        engine_module.PREFILL_GRAPH_TOKENS = args.graph_tokens
    cap = min(engine_module.PREFILL_GRAPH_TOKENS, engine_module.step.PREFILL_CHUNK_TOKENS)
    target = random_smollm2()
    engine = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=1))
    if args.eager_layers:
        engine.compile_prefill = False  # an older tree without the attribute prefills eagerly anyway
    rng = random.Random(args.seed)
    vocab = target.config.vocab_size
    engine.reserve(max(c for _, c in args.cases), max(hi for _, hi in LENGTHS.values()) + 64)
    timed(engine, [[rng.randrange(vocab) for _ in range(7)]])  # the process's first CUDA work
    rows = []
    for name, c in args.cases:
        lo, hi = LENGTHS[name]
        prompts = [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(c)]
        width = max(len(p) for p in prompts)
        timed(engine, prompts)  # warm: plans, graph capture
        ms = [timed(engine, prompts) for _ in range(args.repeats)]
        tokens = sum(len(p) for p in prompts)
        tb = padded_prefill_width(width, 1 << 30)  # the cache here is longer than any padded width
        row = {"workload": name, "c": c, "tokens": tokens, "width": width, "padded_width": tb,
               "graphed": c * tb <= cap, "median_ms": statistics.median(ms), "min_ms": min(ms), "ms": ms,
               "attention_kernels": attention_kernels(engine, prompts)}
        rows.append(row)
        print(f"{args.label:>10} {name} c={c:3d}: {tokens:6d} tokens (width {width}, graphed {row['graphed']}): "
              f"median {row['median_ms']:7.2f} ms, min {row['min_ms']:7.2f}", flush=True)
    write_doc("prefill_batch_gpu.py", argv, {"label": args.label, "graph_tokens": cap, "results": rows,
                                            "compiled_layers": bool(getattr(engine, "compile_prefill", False))},
              args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

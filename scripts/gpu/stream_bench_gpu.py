"""Data-generation decoding on CUDA: fixed chunks (``SpecDecoder``) against continuous batching (``StreamDecoder``).

Both decode the same prompts on a SmolLM2-shaped target with random weights in bf16 (compiled
layers, CUDA graphs), at the data generator's concurrency. Random weights never emit EOS, so each
request gets a token limit drawn like the real responses of the H200 data sessions (about half
stop at the 320-token cap, the rest earlier; 222 tokens on average in the seed-1 session):

* chunks: ``--chunks`` chunks of ``c`` prompts in length order, each decoded to 320 tokens (a
  chunk lasts as long as its longest response, which in real data reaches the cap); it is
  credited with the tokens its requests' limits allow, which is what the old generator kept;
* stream: every prompt through one ``StreamDecoder``, each to its own limit (``--temperatures``:
  greedy and sampled rows).

Usage: python scripts/gpu/stream_bench_gpu.py [--out FILE.json] [-c 1024] [--prompts 4096]
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time

import torch

from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.provenance import run_info
from peagle_lab.stream import StreamDecoder
from peagle_lab.testing import random_smollm2


def workload(n: int, vocab: int, cap: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(rng.randrange(60, 250))] for _ in range(n)]
    limits = [cap if rng.random() < 0.5 else rng.randrange(16, cap) for _ in range(n)]
    return prompts, limits


def chunked(target, prompts, limits, c: int, cap: int, chunks: int) -> dict:
    order = sorted(range(len(prompts)), key=lambda q: len(prompts[q]))
    eng = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=cap))
    eng.generate([prompts[q] for q in order[:c]], eos_token_ids=())  # warm-up: compile, capture
    torch.cuda.synchronize()
    t0, steps, credited = time.perf_counter(), 0, 0
    for i in range(chunks):
        part = order[i * c:(i + 1) * c]
        m = eng.generate([prompts[q] for q in part], eos_token_ids=()).metrics
        steps += m.num_steps
        credited += sum(limits[q] for q in part)
    wall = time.perf_counter() - t0
    return {"path": "chunks", "c": c, "requests": chunks * c, "tokens": credited, "wall_s": wall,
            "tokens_per_s": credited / wall, "step_ms": 1e3 * wall / steps, "warmup_s": eng.warmup_s,
            "row_use": credited / (steps * c)}


def streamed(target, prompts, limits, c: int, sync_every: int, temperature: float = 0.0) -> dict:
    dec = StreamDecoder(target, concurrency=c, sync_every=sync_every, temperature=temperature)
    dec.generate(prompts[:c], 8, ())  # warm-up: compile, capture
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = dec.generate(prompts, limits, ())
    wall = time.perf_counter() - t0
    s = res.stats
    assert all(len(t) == m for t, m in zip(res.tokens, limits)), "a request stopped short of its limit"
    return {"path": "stream", "c": c, "sync_every": sync_every, "temperature": temperature, "requests": s.requests,
            "tokens": s.output_tokens,
            "wall_s": wall, "tokens_per_s": s.output_tokens / wall,
            "step_ms": 1e3 * (s.decode_s - s.warmup_s) / max(s.steps, 1), "prefill_s": s.prefill_s,
            "warmup_s": s.warmup_s, "row_use": s.row_use, "prefills": s.prefills, "buckets": s.buckets}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--concurrency", type=int, default=1024)
    ap.add_argument("--prompts", type=int, default=4096)
    ap.add_argument("--cap", type=int, default=320, help="the response cap (--response-max-tokens)")
    ap.add_argument("--chunks", type=int, default=2, help="chunks timed on the chunked path")
    ap.add_argument("--sync-every", type=int, nargs="+", default=[4])
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0],
                    help="stream rows at each (sampling replays in the same CUDA graph as greedy decoding)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("stream_bench_gpu.py needs CUDA")
    target = random_smollm2()
    prompts, limits = workload(args.prompts, target.config.vocab_size, args.cap)
    doc = {**run_info(shlex.join(["python", *sys.argv])),
           "what": "data-generation decoding: fixed chunks vs continuous batching, bf16, SmolLM2 shape, random weights",
           "rows": []}
    for row in [chunked(target, prompts, limits, args.concurrency, args.cap, args.chunks)] + \
               [streamed(target, prompts, limits, args.concurrency, s, t) for t in args.temperatures
                for s in args.sync_every]:
        doc["rows"].append(row)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
        if args.out:
            json.dump(doc, open(args.out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Why is a prompt shape's first prefill slow? Cold against warm prefill on CUDA, per attention backend.

In the H200 K sweeps plain decoding's c = 1 prefills, which ran cold (each prompt a new width), took
50–54 ms a request, the warmed speculative cells' 22–25 ms. The eager prefill calls SDPA with an
explicit mask, and a backend that builds an execution plan per shape (cuDNN attention, which recent
torch releases try first on Hopper and Blackwell) would pay that on every new prompt width. This
script times ``SpecDecoder``'s plain-decoding prefill (1 new token) on a SmolLM2-shaped random bf16
target for a list of prompt widths, each twice (cold, then warm), under:

* ``default``: torch's own SDPA backend order;
* ``no-cudnn``: ``torch.nn.attention.sdpa_kernel`` without cuDNN attention (efficient, flash, math);
* ``prefill_graphs``: ``SpecConfig(prefill_graphs=True)``, widths padded to a multiple of 64 and
  replayed as CUDA graphs (the first call per padded width captures one).

It also names the attention kernels that one cold prefill launched (``torch.profiler``), so the JSON
says which backend ran. Usage: python scripts/gpu/prefill_cold_gpu.py [--out FILE.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import random
import shlex
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.provenance import run_info
from peagle_lab.testing import random_smollm2

NO_CUDNN = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def timed_prefill(engine: SpecDecoder, prompts: list[list[int]]) -> float:
    """Milliseconds of one ``generate`` call's prefill of ``prompts`` (the engine's own timer)."""
    torch.cuda.synchronize()
    return 1e3 * engine.generate(prompts, max_new_tokens=1, eos_token_ids=()).metrics.prefill_s


def attention_kernels(engine: SpecDecoder, prompts: list[list[int]]) -> list[str]:
    """Names of the attention kernels one prefill of ``prompts`` launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        timed_prefill(engine, prompts)
    names = {e.key for e in prof.key_averages()}
    return sorted(n for n in names if any(w in n.lower() for w in ("attention", "fmha", "cudnn", "flash", "sdpa")))


def write_doc(script: str, argv, fields: dict, out: str | None) -> None:
    """The JSON of a run of ``script`` (device, versions, command, commit, then ``fields``) into ``out``."""
    doc = {**run_info(f"python scripts/gpu/{script} " + shlex.join(argv or sys.argv[1:])),
           "target": "SmolLM2-135M shape, random weights, bf16", **fields}
    if out:
        with open(out, "w") as f:
            json.dump(doc, f, indent=2)


def run(mode: str, widths: list[int], seed: int) -> dict:
    target = random_smollm2()
    vocab = target.config.vocab_size
    engine = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=1,
                                                  prefill_graphs=mode == "prefill_graphs"))
    rng = random.Random(seed)
    ctx = sdpa_kernel(NO_CUDNN) if mode == "no-cudnn" else contextlib.nullcontext()
    with ctx:
        engine.reserve(1, max(widths) + 64)
        timed_prefill(engine, [[rng.randrange(vocab) for _ in range(7)]])  # the process's first CUDA work
        kernels = attention_kernels(engine, [[rng.randrange(vocab) for _ in range(widths[0] - 1)]])
        rows = []
        for w in widths:
            prompt = [rng.randrange(vocab) for _ in range(w)]
            t0 = time.perf_counter()
            cold = timed_prefill(engine, [prompt])
            warm = timed_prefill(engine, [prompt])
            rows.append({"width": w, "cold_ms": cold, "warm_ms": warm, "wall_s": time.perf_counter() - t0})
            print(f"{mode:>14} width {w:4d}: cold {cold:7.1f} ms, warm {warm:6.1f} ms", flush=True)
    return {"mode": mode, "attention_kernels": kernels, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[37, 53, 71, 90, 113, 150, 199, 257])
    ap.add_argument("--modes", nargs="+", default=["default", "no-cudnn", "prefill_graphs"],
                    choices=["default", "no-cudnn", "prefill_graphs"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("prefill_cold_gpu.py: needs CUDA", file=sys.stderr)
        return 2
    if min(args.widths) < 2:
        print(f"prefill_cold_gpu.py: --widths {args.widths}: every width must be at least 2", file=sys.stderr)
        return 2
    # each mode gets widths of its own (shifted by its index): a per-shape cache that one mode filled
    # (cuDNN's plans are kept per process) must not make the next mode's cold calls warm
    results = [run(m, [w + i for w in args.widths], args.seed) for i, m in enumerate(args.modes)]
    write_doc("prefill_cold_gpu.py", argv, {"results": results}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

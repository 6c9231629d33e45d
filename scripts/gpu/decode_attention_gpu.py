"""Decode attention on CUDA: the split-KV Triton kernel and a grouped-rows candidate against SDPA.

Two measurements, side by side in one run, on a SmolLM2-shaped model (9 query heads over 3 K/V
heads, head dim 64) in bf16:

1. the attention call alone at decode shapes (c, T query tokens, S cached positions), median of
   CUDA-event timings, with each path's largest difference from the float32 reference;
2. plain or speculative decoding through the engine (CUDA graphs, ``--compile`` off or on) with
   each attention path: ms per decode step.

Paths: ``enable_gqa`` (SDPA with ``enable_gqa`` and the boolean mask: what the engine ran before
``SpecConfig.decode_attention``; cuDNN's kernels on an H200), ``grouped`` (the query heads that
share a K/V head folded into rows of that head, through SDPA: measured slower at every shape on the
H200 on 2026-12-01, ``docs/results/h200/decode_attention/``, not adopted) and ``triton``
(``peagle_lab.kernels.decode_attention``: split-KV, one read of K/V per K/V head).

Usage: python scripts/gpu/decode_attention_gpu.py [--out FILE.json] [-c 256 1024] [--prompt-len 200]
       [--paths enable_gqa triton] [--method peagle -k 7] [--skip-attention]
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.kernels.decode_attention import decode_attention, decode_attention_ref
from peagle_lab.models import llama
from peagle_lab.models.llama import LlamaConfig, LlamaModel
from peagle_lab.provenance import run_info
from peagle_lab.testing import random_smollm2, tiny_drafter

SHAPES = [(1024, 1, 1024), (1024, 1, 512), (256, 1, 1024), (64, 8, 512), (64, 1, 512), (1, 8, 512),
          (64, 8, 1024), (64, 3, 1024), (1, 8, 6144), (1, 1, 6144), (8, 8, 6144), (64, 8, 6144)]
PATHS = ("enable_gqa", "grouped", "triton")


def grouped_attend(q, k, v, mask):
    """Grouped-query attention with the ``rep = nh / nkv`` query heads of each K/V head as ``rep·T`` rows."""
    c, nh, T, hd = q.shape
    nkv = k.shape[1]
    rep = nh // nkv
    qg = q.reshape(c, nkv, rep * T, hd)  # query head h = j·rep + r uses K/V head j; row r·T + t
    mg = mask[:, :, None].expand(-1, -1, rep, -1, -1).reshape(mask.shape[0], 1, rep * T, mask.shape[-1])
    return F.scaled_dot_product_attention(qg, k, v, attn_mask=mg).reshape(c, nh, T, hd)


def gqa_sdpa(q, k, v, mask):
    """The path decode steps took before: SDPA with enable_gqa (CUDA falls back to its math kernel)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def time_call(fn, reps: int = 30) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def attention_rows(cfg: LlamaConfig, paths: tuple[str, ...]) -> list[dict]:
    fns = {"enable_gqa": gqa_sdpa, "grouped": grouped_attend,
           "triton": lambda q, k, v, m: decode_attention(q, k, v, m, backend="triton")}
    rows = []
    for c, T, S in SHAPES:
        q = torch.randn(c, cfg.num_attention_heads, T, cfg.head_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(c, cfg.num_key_value_heads, S, cfg.head_dim, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        pos = torch.randint(T, S, (c, 1), device="cuda") + torch.arange(T, device="cuda") - T + 1
        mask = llama.attention_mask(pos, torch.arange(S, device="cuda").expand(c, -1))
        ref = decode_attention_ref(q, k, v, mask).float()
        row = {"c": c, "T": T, "S": S}
        for name in paths:
            fn = fns[name]
            row[f"{name}_ms"] = time_call(lambda: fn(q, k, v, mask))
            row[f"{name}_max_abs_diff"] = float((fn(q, k, v, mask).float() - ref).abs().max())
        for name in paths[1:]:
            row[f"{name}_speedup"] = row[f"{paths[0]}_ms"] / row[f"{name}_ms"]
        rows.append(row)
        print(json.dumps({k_: round(x, 4) if isinstance(x, float) else x for k_, x in row.items()}), flush=True)
    return rows


def engine_rows(target: LlamaModel, concurrencies: list[int], prompt_len: int, new_tokens: int,
                compile_mode: str = "off", paths: tuple = PATHS, method: str = "baseline", k: int = 1) -> list[dict]:
    rows, original = [], llama.attend
    drafter = tiny_drafter(target, method, num_hidden_layers=4 if method == "peagle" else 1) \
        if method != "baseline" else None

    def with_grouped(q, k, v, mask, decode=None):  # decode steps through the candidate, the rest as before
        if isinstance(mask, torch.Tensor) and q.shape[2] <= llama.PREFILL_QUERIES and k.shape[1] != q.shape[1]:
            return grouped_attend(q, k, v, mask)
        return original(q, k, v, mask, decode)

    for c in concurrencies:
        prompts = [[int(t) for t in torch.randint(0, target.config.vocab_size, (prompt_len,))] for _ in range(c)]
        for name in paths:
            llama.attend = with_grouped if name == "grouped" else original
            try:
                cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=new_tokens,
                                 compile=compile_mode, decode_attention="triton" if name == "triton" else "sdpa")
                engine = SpecDecoder(target, drafter, cfg)
                engine.generate(prompts, eos_token_ids=())  # warm-up: allocates, captures the graphs
                t0 = time.perf_counter()
                m = engine.generate(prompts, eos_token_ids=()).metrics
                wall = time.perf_counter() - t0
            finally:
                llama.attend = original
            row = {"c": c, "attention": name, "method": method, "k": cfg.k, "compile": compile_mode,
                   "warmup_s": engine.warmup_s, "prompt_len": prompt_len, "new_tokens": new_tokens,
                   "step_ms": 1e3 * m.decode_s / max(m.num_steps, 1), "decode_tok_s": c * (new_tokens - 1) / m.decode_s,
                   "prefill_s": m.prefill_s, "wall_s": wall}
            rows.append(row)
            print(json.dumps({k: round(x, 3) if isinstance(x, float) else x for k, x in row.items()}), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--concurrency", nargs="+", type=int, default=[256, 1024])
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--compile", default="off", choices=["off", "on"], help="the engine's SpecConfig.compile")
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS,
                    help="the first is the baseline of the speedups")
    ap.add_argument("--method", default="baseline", choices=["baseline", "eagle3", "peagle"],
                    help="the engine rows' method (random drafters: every step verifies K + 1 tokens)")
    ap.add_argument("-k", type=int, default=7, help="K of the engine rows' speculative method")
    ap.add_argument("--skip-attention", action="store_true", help="the engine measurement only")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("decode_attention_gpu.py: needs CUDA", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    cfg = LlamaConfig()
    doc = {**run_info(shlex.join(["python", *sys.argv])),
           "what": "decode attention: " + ", ".join(args.paths) + "; bf16, SmolLM2 shape, random weights"}
    doc["attention"] = [] if args.skip_attention else attention_rows(cfg, tuple(args.paths))
    if args.out:  # the first half survives a cut-short run
        json.dump(doc, open(args.out, "w"), indent=2)
    target = random_smollm2(seed=None)  # the generator goes on from the attention rows' draws
    doc["engine"] = engine_rows(target, args.concurrency, args.prompt_len, args.new_tokens, args.compile,
                                tuple(args.paths), args.method, args.k)
    if args.out:
        json.dump(doc, open(args.out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

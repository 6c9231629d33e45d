"""Decode attention on CUDA: the split-KV Triton kernel, its variants and SDPA, side by side.

Two measurements, in one run, on a SmolLM2-shaped model (9 query heads over 3 K/V heads, head
dim 64) in bf16:

1. the attention call alone at decode shapes: c requests, T query tokens, a cache block of S
   positions of which each request holds a ragged number (``kv_len``), for 30 layers (30 distinct
   K/V tensors, so the L2 cache cannot hold them as one layer's would be) captured in one CUDA
   graph and replayed: µs per call with launch overhead gone, as in the engine; with each path's
   largest difference from the float32 reference;
2. plain or speculative decoding through the engine (CUDA graphs, ``--compile`` off or on) with
   each attention path: ms per decode step.

Paths: ``enable_gqa`` (SDPA with ``enable_gqa`` and the boolean mask; cuDNN's kernels on an H200),
``grouped`` (the query heads that share a K/V head folded into rows of that head, through SDPA:
measured slower at every shape on the H200 on 2026-12-01, ``docs/results/h200/decode_attention/``,
not adopted), ``triton`` (``peagle_lab.kernels.decode_attention`` as the engine calls it) and, in
the attention half only, ``--variants`` of the kernel's tuning (``stages=1`` turns the key loop's
pipelining off; ``warps=N``, ``block_n=N``, ``splits=N``) and ``--baseline-kernel FILE``, an earlier
version of the kernel file (its op renamed) to compare against in the same run.

Usage: python scripts/gpu/decode_attention_gpu.py [--out FILE.json] [-c 256 1024] [--prompt-len 200]
       [--paths enable_gqa triton] [--variants stages=1 warps=2] [--baseline-kernel OLD.py]
       [--shapes 1,1,2048 64,1,4096]
       [--method peagle -k 7] [--skip-attention] [--skip-engine]
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import shlex
import sys
import time

import torch
import torch.nn.functional as F

from peagle_lab.bench.timing import replay_ms
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.kernels import decode_attention as da
from peagle_lab.kernels.decode_attention import decode_attention_ref
from peagle_lab.models import kv_cache, llama
from peagle_lab.models.llama import LlamaConfig, LlamaModel
from peagle_lab.provenance import run_info
from peagle_lab.testing import random_smollm2, tiny_drafter

# (c, T, S, shortest, longest request): chat-length caches (the benchmark's prompts are 30-461
# tokens, plus 128 new), and the long workload's 2k-7.7k-token prompts.
SHAPES = [(1, 1, 640, 150, 600), (1, 8, 640, 150, 600), (64, 1, 640, 150, 600), (64, 3, 640, 150, 600),
          (64, 8, 640, 150, 600), (1, 1, 7744, 2000, 7700), (1, 8, 7744, 2000, 7700), (8, 1, 7744, 2000, 7700),
          (8, 8, 7744, 2000, 7700), (64, 1, 7744, 2000, 7700), (64, 4, 7744, 2000, 7700), (64, 8, 7744, 2000, 7700)]
LAYERS = 30  # calls per captured graph, one K/V pair each (SmolLM2's layers)
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


def time_graphed(fn, inputs: list[tuple], replays: int = 20) -> float:
    """µs per call of ``fn(*inputs[i])`` for every i, captured in one CUDA graph and replayed."""
    return 1e3 * replay_ms(lambda: [fn(*args) for args in inputs], "cuda", replays) / len(inputs)


def parse_variant(text: str) -> dict:
    """``"stages=1,warps=2"`` → the keyword arguments of ``kernels.decode_attention._launch``.

    ``tiles=N`` cuts each K/V head's query rows into N tiles, one a program.

    >>> parse_variant("splits=1,tiles=2")
    {'num_splits': 1, 'row_tiles': 2}
    """
    names = {"stages": "num_stages", "warps": "num_warps", "block_n": "block_n", "splits": "num_splits",
             "tiles": "row_tiles"}
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key not in names or not value.isdigit() or int(value) < 1:
            raise ValueError(f"variant {text!r}: expected comma-separated {'|'.join(names)}=<positive int>")
        out[names[key]] = int(value)
    return out


def parse_shape(text: str) -> tuple[int, int, int, int, int]:
    """``"c,T,S"`` or ``"c,T,S,shortest,longest"`` → an attention shape of ``SHAPES``.

    Without the last two, each request holds between a quarter and all but ``T`` of the block's
    ``S`` positions (``kv_len``), as the built-in shapes roughly do.

    >>> parse_shape("1,1,2048"), parse_shape("64,1,640,150,600")
    ((1, 1, 2048, 512, 2047), (64, 1, 640, 150, 600))
    """
    parts = text.split(",")
    if len(parts) not in (3, 5) or not all(x.isdigit() and int(x) > 0 for x in parts):
        raise ValueError(f"shape {text!r}: expected c,T,S or c,T,S,shortest,longest (positive ints)")
    c, T, S, *lens = (int(x) for x in parts)
    shortest, longest = lens or (max(T, S // 4), S - T)
    if not T <= shortest <= longest <= S:
        raise ValueError(f"shape {text!r}: expected T <= shortest <= longest <= S")
    return c, T, S, shortest, longest


def variant_fn(tuning: dict):
    """The kernel with ``tuning`` (``parse_variant``'s keywords) in place of its defaults."""
    splits = tuning.get("num_splits")
    rest = {x: y for x, y in tuning.items() if x != "num_splits"}
    return lambda q, k, v, mask, kv_len: da._launch(q, k, v, mask, kv_len, splits, **rest)


def load_baseline_kernel(path: str):
    """An earlier ``decode_attention.py`` as ``peagle_lab.kernels._baseline`` (its custom op renamed)."""
    src = open(path).read().replace('"peagle_lab::decode_attention"', '"peagle_lab::decode_attention_baseline"')
    spec = importlib.util.spec_from_loader("peagle_lab.kernels._baseline", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path  # triton.jit reads the source of each kernel from its file
    exec(compile(src, path, "exec"), module.__dict__)
    return module


def attention_rows(cfg: LlamaConfig, paths: tuple[str, ...], variants: list[str], baseline=None,
                   shapes=SHAPES) -> list[dict]:
    fns = {"enable_gqa": lambda q, k, v, m, n: gqa_sdpa(q, k, v, m),
           "grouped": lambda q, k, v, m, n: grouped_attend(q, k, v, m),
           "triton": lambda q, k, v, m, n: da.decode_attention_op(q, k, v, m, n)}
    if baseline is not None:  # kernels before 1ea94a8 took no kv_len: they walk the whole block
        takes_kv_len = "kv_len" in inspect.signature(baseline.decode_attention).parameters
        fns["baseline"] = lambda q, k, v, m, n: baseline.decode_attention(q, k, v, m, *([n] if takes_kv_len else []),
                                                                          backend="triton")
    for text in variants:
        fns[f"triton[{text}]"] = variant_fn(parse_variant(text))
    names = [p for p in paths if p in fns] + (["baseline"] if baseline is not None else []) \
        + [f"triton[{t}]" for t in variants]
    rows = []
    for c, T, S, shortest, longest in shapes:
        hq, hk, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        lens = torch.randint(shortest, longest + 1, (c,), device="cuda")
        pos = lens[:, None] - T + torch.arange(T, device="cuda")  # the last T positions of each request
        mask = kv_cache.attention_mask(pos, torch.arange(S, device="cuda").expand(c, -1))
        kv_len = lens.to(torch.int32)
        inputs = [(torch.randn(c, hq, T, hd, device="cuda", dtype=torch.bfloat16),
                   torch.randn(c, hk, S, hd, device="cuda", dtype=torch.bfloat16),
                   torch.randn(c, hk, S, hd, device="cuda", dtype=torch.bfloat16), mask, kv_len)
                  for _ in range(LAYERS)]
        ref = decode_attention_ref(*inputs[0][:4]).float()
        row = {"c": c, "T": T, "S": S, "kv_len_mean": float(lens.float().mean()), "shortest": shortest, "longest": longest}
        for name in names:
            fn = fns[name]
            row[f"{name}_us"] = time_graphed(fn, inputs)
            row[f"{name}_max_abs_diff"] = float((fn(*inputs[0]).float() - ref).abs().max())
        for name in names[1:]:
            row[f"{name}_speedup"] = row[f"{names[0]}_us"] / row[f"{name}_us"]
        rows.append(row)
        print(json.dumps({k_: round(x, 4) if isinstance(x, float) else x for k_, x in row.items()}), flush=True)
        del inputs
        torch.cuda.empty_cache()
    return rows


def engine_rows(target: LlamaModel, concurrencies: list[int], prompt_len: int, new_tokens: int,
                compile_mode: str = "off", paths: tuple = PATHS, method: str = "baseline", k: int = 1) -> list[dict]:
    rows, original = [], llama.attend
    drafter = tiny_drafter(target, method, num_hidden_layers=4 if method == "peagle" else 1) \
        if method != "baseline" else None

    def with_grouped(q, k, v, mask, decode=None, kv_len=None):  # decode steps through the candidate
        if isinstance(mask, torch.Tensor) and q.shape[2] <= kv_cache.PREFILL_QUERIES and k.shape[1] != q.shape[1]:
            return grouped_attend(q, k, v, mask)
        return original(q, k, v, mask, decode, kv_len)

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
    ap.add_argument("--variants", nargs="*", default=[],
                    help="kernel tunings for the attention half, e.g. stages=1 warps=2 block_n=128 splits=1")
    ap.add_argument("--baseline-kernel", help="an earlier peagle_lab/kernels/decode_attention.py to time beside")
    ap.add_argument("--shapes", nargs="+", default=None, metavar="c,T,S[,shortest,longest]",
                    help="the attention half's shapes instead of the built-in ones, e.g. 1,1,2048 64,1,4096 "
                         "(T = 1 at several cache lengths: where SDPA and the kernel cross for plain decoding)")
    ap.add_argument("--skip-attention", action="store_true", help="the engine measurement only")
    ap.add_argument("--skip-engine", action="store_true", help="the attention measurement only")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    try:
        for text in args.variants:
            parse_variant(text)
        shapes = [parse_shape(t) for t in args.shapes] if args.shapes else SHAPES
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        print("decode_attention_gpu.py: needs CUDA", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    cfg = LlamaConfig()
    doc = {**run_info(shlex.join(["python", *sys.argv])),
           "what": "decode attention: " + ", ".join(args.paths + [f"triton[{t}]" for t in args.variants])
           + "; bf16, SmolLM2 shape, random weights; attention rows: µs per call, 30 layers in one CUDA graph"}
    baseline = load_baseline_kernel(args.baseline_kernel) if args.baseline_kernel else None
    doc["attention"] = [] if args.skip_attention else attention_rows(cfg, tuple(args.paths), args.variants, baseline,
                                                                        shapes)
    if args.out:  # the first half survives a cut-short run
        json.dump(doc, open(args.out, "w"), indent=2)
    if args.skip_engine:
        return 0
    target = random_smollm2(seed=None)  # the generator goes on from the attention rows' draws
    doc["engine"] = engine_rows(target, args.concurrency, args.prompt_len, args.new_tokens, args.compile,
                                tuple(args.paths), args.method, args.k)
    if args.out:
        json.dump(doc, open(args.out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

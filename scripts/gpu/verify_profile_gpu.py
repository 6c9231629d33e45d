"""Where does a speculative verify step's time go on CUDA? Kernel profile per decode shape.

The H200 sweeps show a verify forward (T = K + 1 query tokens a request) costing more than a plain
step (T = 1) in three places: long prompts (4.1 ms at c = 1 against 1.23, flat in K), code prompts
at c = 1 (1.33 against 1.17) and c = 64 (2.2 against 1.23 ms at K = 7). This script decodes with
``SpecDecoder`` on a SmolLM2-shaped random bf16 target and random drafters shaped as the shipped heads (random
drafts are rejected, so every step verifies K + 1 tokens), compiled as the engine compiles, and for
each (method, c, prompt length):

* times a decode step with CUDA graphs;
* profiles the same run eagerly (compiled, no graphs: the same kernels, each visible to
  ``torch.profiler``) and lists the kernels that take the most GPU time per decode step.

``--cases method,K,c,prompt_len ...`` replaces the built-in list (e.g. P-EAGLE at K = 4 and K = 5 to
see which kernels grow when the verify batch goes from 5 to 6 rows a request).

``--no-combo-kernels`` compiles without inductor's ``combo_kernels``, for an A/B in one job.

Usage: python scripts/gpu/verify_profile_gpu.py [--out FILE.json] [--top 12] [--cases peagle,4,1,400 ...]
       [--no-combo-kernels]
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys

import torch

from peagle_lab.config import SpecConfig
from peagle_lab.engine import graphs as engine_module  # COMBO_KERNELS lives where compiled() reads it
from peagle_lab.engine import SpecDecoder
from peagle_lab.provenance import run_info
from peagle_lab.testing import random_smollm2, tiny_drafter

CASES = [  # (method, K, c, prompt length)
    ("baseline", 1, 1, 6000), ("peagle", 7, 1, 6000), ("peagle", 2, 1, 6000),
    ("baseline", 1, 1, 400), ("peagle", 7, 1, 400),
    ("baseline", 1, 64, 400), ("peagle", 2, 64, 400), ("peagle", 7, 64, 400),
]


def parse_case(text: str) -> tuple[str, int, int, int]:
    """``"peagle,7,1,400"`` → ("peagle", 7, 1, 400): method, K, concurrency, prompt length.

    >>> parse_case("baseline,1,64,400")
    ('baseline', 1, 64, 400)
    """
    parts = text.split(",")
    methods = ("baseline", "eagle3", "peagle")
    try:
        method, k, c, n = parts[0], *(int(p) for p in parts[1:])
    except ValueError:
        method = None
    if len(parts) != 4 or method not in methods or not (1 <= k <= 16 and c >= 1 and n >= 1):
        raise argparse.ArgumentTypeError(f"case {text!r}: expected method,K,c,prompt_len with method one of "
                                         f"{methods}, 1 <= K <= 16, c >= 1 and prompt_len >= 1")
    return method, k, c, n


def _device_us(e) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(e, name):
            return float(getattr(e, name))
    return 0.0


def kernel_table(engine: SpecDecoder, prompts, top: int) -> tuple[list[dict], int]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        m = engine.generate(prompts, eos_token_ids=()).metrics
        torch.cuda.synchronize()
    steps = max(m.num_steps, 1)
    rows = [{"kernel": e.key[:160], "us_per_step": _device_us(e) / steps, "calls_per_step": e.count / steps}
            for e in prof.key_averages()]
    rows = [r for r in rows if r["us_per_step"] > 0]
    rows.sort(key=lambda r: -r["us_per_step"])
    total = sum(r["us_per_step"] for r in rows)
    return [{**r, "share": r["us_per_step"] / total} for r in rows[:top]], steps


def run_case(target, drafter, method: str, k: int, c: int, prompt_len: int, new_tokens: int, top: int) -> dict:
    g = torch.Generator().manual_seed(prompt_len + c)
    vocab = target.config.vocab_size
    prompts = [[int(t) for t in torch.randint(0, vocab, (prompt_len,), generator=g)] for _ in range(c)]
    row = {"method": method, "k": k if method != "baseline" else 0, "c": c, "prompt_len": prompt_len}
    for graphs in (True, False):
        cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=new_tokens, cuda_graphs=graphs)
        engine = SpecDecoder(target, drafter, cfg)
        engine.generate(prompts, eos_token_ids=())  # warm-up: compiles, captures
        if graphs:
            res = engine.generate(prompts, eos_token_ids=())
            row["step_ms"] = 1e3 * res.metrics.decode_s / max(res.metrics.num_steps, 1)
            for part in ("verify_ms", "prep_ms", "draft_ms"):  # the step split, medians over the steps
                row[part] = statistics.median(getattr(t, part) for t in res.trace) if res.trace else 0.0
        else:
            row["kernels"], row["profiled_steps"] = kernel_table(engine, prompts, top)
            row["profiled_us_per_step"] = sum(r["us_per_step"] for r in row["kernels"])
    print(json.dumps({k_: v for k_, v in row.items() if k_ != "kernels"}), flush=True)
    for r in row["kernels"][:6]:
        print(f"    {r['us_per_step']:8.1f} us/step {r['calls_per_step']:6.1f} calls  {r['kernel'][:110]}", flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new-tokens", type=int, default=33)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--out")
    ap.add_argument("--cases", nargs="+", type=parse_case, default=CASES, metavar="method,K,c,prompt_len",
                    help="the (method, K, c, prompt length) cases to run instead of the built-in eight")
    ap.add_argument("--no-combo-kernels", action="store_true",
                    help="compile without inductor's combo_kernels (the engine's default is on), for an A/B")
    args = ap.parse_args(argv)
    if args.no_combo_kernels:
        engine_module.COMBO_KERNELS = False  # before the first engine compiles its layer
    if not torch.cuda.is_available():
        print("verify_profile_gpu.py: needs CUDA", file=sys.stderr)
        return 2
    target = random_smollm2()
    # The shipped heads' shapes: P-EAGLE 4 layers, EAGLE-3 1, both with a 32k draft vocabulary.
    drafters = {"peagle": tiny_drafter(target, "peagle", num_hidden_layers=4, draft_vocab_size=32768),
                "eagle3": tiny_drafter(target, "eagle3", num_hidden_layers=1, draft_vocab_size=32768)}
    doc = {**run_info("python scripts/gpu/verify_profile_gpu.py " + shlex.join(argv or sys.argv[1:])),
           "target": "SmolLM2-135M shape, random weights, bf16; drafters: random 4-layer P-EAGLE and "
                     "1-layer EAGLE-3, 32k draft vocabulary", "combo_kernels": engine_module.COMBO_KERNELS,
           "cases": []}
    for case in args.cases:
        doc["cases"].append(run_case(target, drafters.get(case[0]), *case, args.new_tokens, args.top))
        if args.out:  # what ran survives a cut-short run
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

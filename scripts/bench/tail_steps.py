"""Which requests set a static batch's step count? Per-request steps of one batch, and where each met EOS.

A static batch takes as many steps as its slowest request. This decodes one batch of a
benchmark workload the way the sweep does (fixed length, EOS ignored), rows kept to the end,
and reconstructs from the step trace how many steps each request needed. It reports, per
method and K, the batch's steps, the median / p90 / max request, the slowest requests with
their AL, and how many of each request's tokens came after its first EOS (text the heads were
not trained on: the sweep's fixed length decodes past it, as vLLM's ``--ignore-eos`` does).

    python scripts/bench/tail_steps.py --workload code -c 64 --cases peagle:4 peagle:5 eagle3:2 \\
        --out docs/results/cpu/tail_steps/code_c64.json                         # CPU float32, ~3 min a case
    python scripts/bench/tail_steps.py --tiny --out /tmp/t.json                 # random tiny model: a smoke run
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from peagle_lab.bench.workloads import HashTokenizer, load_workload  # noqa: E402
from peagle_lab.config import SpecConfig, parse_case  # noqa: E402
from peagle_lab.engine import SpecDecoder, StepTrace  # noqa: E402
from peagle_lab.models.checkpoints import write_json  # noqa: E402
from peagle_lab.provenance import run_info  # noqa: E402


def request_steps(trace: list[StepTrace], n: int, max_new: int) -> list[int]:
    """Steps each of ``n`` requests decoded for, from the trace of a batch that kept its rows.

    The prefill makes each request's first token; a step gives every request still short of
    ``max_new`` tokens its accepted drafts plus one, listed in row order (``StepTrace.num_accepted``).

    >>> t = [StepTrace(0, 1.0, 0.0, 0.0, (2, 0), 1), StepTrace(1, 1.0, 0.0, 0.0, (1,), 1)]
    >>> request_steps(t, 2, 4)  # request 0: 1 + 3 tokens in one step; request 1: 1 + 1 + 2
    [1, 2]
    """
    made, steps = [1] * n, [0] * n
    for s in trace:
        live = [b for b in range(n) if made[b] < max_new]
        if len(live) != len(s.num_accepted):
            raise ValueError(f"step {s.step}: {len(s.num_accepted)} counts for {len(live)} requests still decoding; "
                             "the trace must come from a batch that keeps its rows (compact_rows=False)")
        for b, a in zip(live, s.num_accepted):
            made[b] += a + 1
            steps[b] += 1
    return steps


def tokens_past_eos(tokens: list[int], eos: set[int]) -> int:
    """How many of ``tokens`` follow the first EOS among them (0 without one).

    >>> tokens_past_eos([5, 2, 7, 8], {2}), tokens_past_eos([5, 6], {2})
    (2, 0)
    """
    return next((len(tokens) - i - 1 for i, t in enumerate(tokens) if t in eos), 0)


def case(target, drafter, method: str, k: int, prompts: list[list[int]], max_new: int, eos: set[int]) -> dict:
    """One batch of ``method`` at ``k``: the batch's and each request's steps, and the slowest requests."""
    engine = SpecDecoder(target, drafter, SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=max_new,
                                                     compact_rows=False))
    t0 = time.perf_counter()
    res = engine.generate(prompts, eos_token_ids=())
    steps = request_steps(res.trace, len(prompts), max_new)
    past = [tokens_past_eos(t, eos) for t in res.tokens]
    ranked = sorted(range(len(prompts)), key=lambda b: -steps[b])
    q = statistics.quantiles(steps, n=10, method="inclusive") if len(steps) > 1 else [steps[0]] * 9
    return {"method": method, "k": k, "acceptance_length": res.metrics.acceptance_length,
            "batch_steps": len(res.trace), "median": statistics.median(steps), "p90": q[8], "max": max(steps),
            "slowest": [{"request": b, "steps": steps[b], "al": (max_new - 1) / steps[b],
                         "tokens_past_eos": past[b]} for b in ranked[:5]],
            "requests_past_eos": sum(p > 0 for p in past), "steps": steps, "tokens_past_eos": past,
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="code", choices=["chat", "code"])
    p.add_argument("-c", "--concurrency", type=int, default=64, help="the batch: the workload's first c prompts")
    p.add_argument("--cases", nargs="+", default=["peagle:4", "eagle3:2"], help="METHOD:K each (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", required=True)
    p.add_argument("--tiny", action="store_true", help="tiny random target and heads (a smoke run)")
    args = p.parse_args()
    try:
        cases = [parse_case(c) for c in args.cases]
    except ValueError as e:
        p.error(f"--cases: {e}")
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    if args.tiny:
        from peagle_lab.testing import tiny_drafter, tiny_target
        target = tiny_target(seed=2, vocab_size=24)
        tok = HashTokenizer(target.config.vocab_size)
        heads = {m: tiny_drafter(target, m) for m in ("eagle3", "peagle")}
    else:
        from peagle_lab import load_default
        from peagle_lab.heads import bundled_head_dir
        from peagle_lab.heads.io import load_head
        target, tok = load_default(dtype=torch.float32, device="cpu", quiet=True)
        heads = {m: load_head(bundled_head_dir(m), target) for m in {m for m, _ in cases}}
    limit = target.config.max_position_embeddings - args.max_new_tokens - max(k for _, k in cases) - 1
    prompts = [list(q.token_ids) for q in load_workload(args.workload, args.concurrency, tokenizer=tok,
                                                        max_prompt_tokens=limit)]
    eos = set(target.config.eos_token_ids)
    doc = {"workload": args.workload, "concurrency": args.concurrency, "max_new_tokens": args.max_new_tokens,
           "dtype": "float32", "heads": "tiny" if args.tiny else "bundled", "cases": [], **run_info()}
    for method, k in cases:
        r = case(target, heads[method], method, k, prompts, args.max_new_tokens, eos)
        doc["cases"].append(r)
        print(f"{method} K={k}: AL {r['acceptance_length']:.2f}, batch {r['batch_steps']} steps; a request's median "
              f"{r['median']}, p90 {r['p90']:.0f}, max {r['max']}; slowest {r['slowest'][:3]}", flush=True)
        write_json(args.out, doc)  # after each case: an interrupted run keeps what it measured
    return 0


if __name__ == "__main__":
    sys.exit(main())

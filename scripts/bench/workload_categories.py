"""Where do the heads accept least? Acceptance per prompt category of a benchmark workload.

The chat workload mixes eight categories (writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities). This decodes each prompt greedily with plain decoding (stopping at the end of sequence, as
the training evaluation does), then measures each head's acceptance along that text with the real engine
(``bench.forced.acceptance_on_text``: the target forced to the text, so every head is judged on the same
tokens), and reports AL = 1 + accepted / drafts per category and overall. A category far below the
others is one the training data covers badly (or one that is hard to draft at all).

    python scripts/bench/workload_categories.py --cases peagle:8 eagle3:4 --out categories.json   # CPU, ~10 min
    python scripts/bench/workload_categories.py --tiny --prompts 8 --out /tmp/c.json              # a smoke run
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from peagle_lab.acceptance import acceptance_length  # noqa: E402
from peagle_lab.bench.forced import acceptance_on_text  # noqa: E402
from peagle_lab.bench.workloads import HashTokenizer, load_workload  # noqa: E402
from peagle_lab.config import SpecConfig  # noqa: E402
from peagle_lab.engine import SpecDecoder  # noqa: E402
from peagle_lab.models.checkpoints import write_json  # noqa: E402
from peagle_lab.provenance import run_info  # noqa: E402


def parse_case(text: str) -> tuple[str, int]:
    """``"peagle:8"`` -> ``("peagle", 8)``; ValueError naming the text otherwise."""
    method, _, k = text.partition(":")
    if method not in ("eagle3", "peagle") or not k.isdigit() or not 1 <= int(k) <= 16:
        raise ValueError(f"case {text!r}: expected METHOD:K with METHOD eagle3 or peagle and 1 <= K <= 16")
    return method, int(k)


def category_acceptance(target, drafter, spec: SpecConfig, by_category: dict[str, list[tuple[list[int], list[int]]]]
                        ) -> dict:
    """AL per category (and overall) of ``drafter`` along the given (prompt, output) pairs."""
    out, drafts, accepted = {}, 0, 0
    for name, pairs in sorted(by_category.items()):
        pairs = [(p, o) for p, o in pairs if o]  # an empty output has nothing to draft
        if not pairs:
            continue
        r = acceptance_on_text(target, drafter, spec, [p for p, _ in pairs], [o for _, o in pairs])
        out[name] = {"acceptance_length": r["acceptance_length"], "num_drafts": r["num_drafts"],
                     "num_accepted_tokens": r["num_accepted_tokens"], "requests": len(pairs),
                     "output_tokens": sum(len(o) for _, o in pairs)}
        drafts, accepted = drafts + r["num_drafts"], accepted + r["num_accepted_tokens"]
    return {"categories": out, "acceptance_length": acceptance_length(accepted, drafts), "num_drafts": drafts,
            "num_accepted_tokens": accepted}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="chat", choices=["chat", "code"])
    p.add_argument("--prompts", type=int, default=80)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--cases", nargs="+", default=["peagle:8", "eagle3:4"], help="METHOD:K each")
    p.add_argument("--eagle3-head", help="an EAGLE-3 head folder (default: the bundled one)")
    p.add_argument("--peagle-head", help="a P-EAGLE head folder (default: the bundled one)")
    p.add_argument("--tiny", action="store_true", help="tiny random target and heads (a smoke run)")
    args = p.parse_args()
    try:
        cases = [parse_case(c) for c in args.cases]
    except ValueError as e:
        p.error(str(e))
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    if args.tiny:
        from peagle_lab.testing import tiny_drafter, tiny_target
        target = tiny_target(seed=2, vocab_size=24)  # random heads are right now and then among 24 tokens
        tok = HashTokenizer(target.config.vocab_size)
        heads = {m: tiny_drafter(target, m) for m in ("eagle3", "peagle")}
    else:
        from peagle_lab import load_default
        from peagle_lab.heads import bundled_head_dir
        from peagle_lab.heads.io import load_head
        target, tok = load_default(dtype=torch.float32, device="cpu", quiet=True)
        paths = {m: getattr(args, f"{m}_head") or str(bundled_head_dir(m)) for m, _ in cases}  # bundled by default
        heads = {m: load_head(path, target) for m, path in paths.items()}
    prompts = load_workload(args.workload, args.prompts, tokenizer=tok)
    ids = [list(q.token_ids) for q in prompts]
    plain = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=args.max_new_tokens))
    outputs = plain.generate(ids).tokens  # the target's own EOS ends each one
    by_category = defaultdict(list)
    for q, i, o in zip(prompts, ids, outputs):
        by_category[q.category].append((i, o))
    doc = {"what": "AL per prompt category along the target's greedy text (stopping at EOS), each head judged on "
                   "the same tokens (bench.forced.acceptance_on_text), float32",
           "workload": args.workload, "prompts": len(ids), "max_new_tokens": args.max_new_tokens,
           "heads": {} if args.tiny else paths, "cases": {}, **run_info()}
    for method, k in cases:
        t0 = time.perf_counter()
        got = category_acceptance(target, heads[method], SpecConfig(method=method, num_speculative_tokens=k), by_category)
        doc["cases"][f"{method}:{k}"] = got
        row = "  ".join(f"{n} {v['acceptance_length']:.2f}" for n, v in got["categories"].items())
        print(f"{method} K={k}: AL {got['acceptance_length']:.3f} | {row} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    write_json(Path(args.out), doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

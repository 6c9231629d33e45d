"""Did a larger draft vocabulary pay? First-draft acceptance where the target's token lay outside the old one.

A draft outside a head's draft vocabulary is never proposed, so before a vocabulary grows, every position whose
greedy token it lacks is lost (``target_ceiling.py`` counts them). After growing it
(``--init-from HEAD --draft-vocab-size N``) those positions can be won, but only if the new output rows learned
them. This decodes benchmark prompts one at a time with K = 1 (so every step drafts exactly one token: the
first draft position) with the old head and with the new one, and splits each head's acceptance by whether the
target's token at that position lies inside the *old* head's draft vocabulary.

    python scripts/bench/vocab_gain.py --old OLD_HEAD --new peagle_lab/heads/peagle --out vocab_gain.json  # CPU
    python scripts/bench/vocab_gain.py --tiny --out /tmp/v.json          # random tiny heads: a smoke run
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from peagle_lab.bench.workloads import HashTokenizer, load_workload  # noqa: E402
from peagle_lab.config import SpecConfig  # noqa: E402
from peagle_lab.engine import SpecDecoder  # noqa: E402
from peagle_lab.models.checkpoints import write_json  # noqa: E402
from peagle_lab.provenance import run_info  # noqa: E402
from peagle_lab.train.vocab import draft_to_target_ids  # noqa: E402


def first_draft_split(target, drafter, method: str, prompts: list[list[int]], inside: set[int],
                      max_new_tokens: int) -> dict:
    """K = 1 decoding of each prompt alone: steps and first-draft acceptance, inside / outside ``inside``."""
    dec = SpecDecoder(target, drafter, SpecConfig(method=method, num_speculative_tokens=1,
                                                  max_new_tokens=max_new_tokens))
    counts = {True: [0, 0], False: [0, 0]}  # inside?: [steps, accepted]
    for prompt in prompts:
        res = dec.generate([prompt])  # stops at the end of sequence, as the training evaluation does
        tokens, pos = res.tokens[0], 1  # tokens[0] comes from the prefill; step i drafts tokens[pos]
        for step in res.trace:
            if pos >= len(tokens):
                break
            accepted = step.num_accepted[0]
            side = counts[tokens[pos] in inside]
            side[0] += 1
            side[1] += accepted
            pos += accepted + 1
    part = lambda s, a: {"steps": s, "acceptance": a / s if s else None}  # noqa: E731
    steps = counts[True][0] + counts[False][0]
    return {"inside_old_vocabulary": part(*counts[True]), "outside_old_vocabulary": part(*counts[False]),
            "all": part(steps, counts[True][1] + counts[False][1]),
            "outside_share": counts[False][0] / steps if steps else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--old", help="the head before its vocabulary grew")
    p.add_argument("--new", help="the head after")
    p.add_argument("--method", default="peagle", choices=["eagle3", "peagle"])
    p.add_argument("--workloads", default="chat,code")
    p.add_argument("--prompts", type=int, default=40, help="prompts per workload")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--tiny", action="store_true", help="tiny random target and heads (a smoke run)")
    args = p.parse_args()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    if args.tiny:
        from peagle_lab.testing import tiny_drafter, tiny_target
        target = tiny_target(seed=2, vocab_size=24)  # random heads are right now and then among 24 tokens
        tok = HashTokenizer(target.config.vocab_size)
        heads = {"old": tiny_drafter(target, args.method, draft_vocab_size=target.config.vocab_size // 2),
                 "new": tiny_drafter(target, args.method)}
    else:
        if not (args.old and args.new):
            p.error("--old and --new name the two head folders (or --tiny for a smoke run)")
        from peagle_lab import load_default
        from peagle_lab.heads.io import load_head
        target, tok = load_default(dtype=torch.float32, device="cpu", quiet=True)
        heads = {"old": load_head(args.old, target), "new": load_head(args.new, target)}
    inside = set(draft_to_target_ids(heads["old"]).tolist())  # the target ids the old head can propose
    out = {"what": "first-draft acceptance (K = 1, one request at a time, temperature 0), split by whether the "
                   "target's token lies inside the old head's draft vocabulary",
           "heads": {"old": args.old or "tiny", "new": args.new or "tiny"}, "method": args.method,
           "old_vocabulary": len(inside), "new_vocabulary": heads["new"].config.draft_vocab_size,
           "max_new_tokens": args.max_new_tokens, "workloads": {}, **run_info()}
    for name in args.workloads.split(","):
        prompts = [list(q.token_ids) for q in load_workload(name, args.prompts, tokenizer=tok)]
        out["workloads"][name] = {"prompts": len(prompts)}
        for which, drafter in heads.items():
            t0 = time.perf_counter()
            got = first_draft_split(target, drafter, args.method, prompts, inside, args.max_new_tokens)
            out["workloads"][name][which] = got
            print(f"{name} {which}: {got} ({time.perf_counter() - t0:.0f} s)", flush=True)
    write_json(Path(args.out), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How sure is the target of its own greedy text? A ceiling for what drafters can learn.

A greedy draft is accepted when it equals the target's argmax. Where the target itself puts
little mass on that argmax (a near-tie), the choice hinges on details of its hidden state that
a small drafter sees only through three taps, so those positions are where acceptance is
lost first. This decodes benchmark prompts greedily with the target and records, at every
generated position, the target's probability of the token it chose; it reports the mean and
the share of positions above several thresholds.

A second ceiling comes from the drafters themselves: a head proposes only tokens of its draft
vocabulary, so the share of those greedy tokens inside it (``token_coverage``) bounds what any
draft position can accept. It is reported for each head given with ``--heads`` (the shipped
ones by default).

    python scripts/bench/target_ceiling.py --out docs/results/cpu/target_ceiling.json   # CPU, ~6 min
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from peagle_lab import load_default  # noqa: E402
from peagle_lab.bench.workloads import load_workload  # noqa: E402
from peagle_lab.config import SpecConfig  # noqa: E402
from peagle_lab.engine import SpecDecoder  # noqa: E402
from peagle_lab.heads.io import load_head  # noqa: E402
from peagle_lab.models.checkpoints import write_json  # noqa: E402
from peagle_lab.provenance import run_info  # noqa: E402
from peagle_lab.train.vocab import token_coverage  # noqa: E402

HEADS = Path(__file__).resolve().parents[2] / "peagle_lab" / "heads"

THRESHOLDS = (0.5, 0.7, 0.9)


@torch.no_grad()
def chosen_token_probs(target, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """The target's probability of each of ``tokens`` after ``prompt`` and the tokens before it.  # [n]"""
    ids = torch.tensor([prompt + tokens])
    logits = target(ids, torch.arange(ids.shape[1])[None], return_taps=False).logits[0]  # [T, V]
    rows = torch.arange(len(prompt) - 1, len(prompt) + len(tokens) - 1)
    return torch.softmax(logits[rows].float(), -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workloads", default="chat,code")
    p.add_argument("--prompts", type=int, default=40, help="prompts per workload")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--heads", nargs="*", default=[str(HEADS / "eagle3"), str(HEADS / "peagle")],
                   help="head folders whose draft vocabulary coverage to report (default: the shipped ones)")
    args = p.parse_args()
    target, tok = load_default(dtype=torch.float32, device="cpu", quiet=True)
    vocabs = {h: load_head(h, target).t2d for h in args.heads}  # a bad folder fails before decoding
    out = {"what": "the target's probability of its own greedy token, per generated position",
           "max_new_tokens": args.max_new_tokens, "workloads": {}, **run_info()}
    for name in args.workloads.split(","):
        prompts = [list(q.token_ids) for q in load_workload(name, args.prompts, tokenizer=tok)]
        dec = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=args.max_new_tokens))
        probs, outputs = [], []
        for start in range(0, len(prompts), 8):
            batch = prompts[start:start + 8]
            for prompt, toks in zip(batch, dec.generate(batch).tokens):
                probs.append(chosen_token_probs(target, prompt, toks))
                outputs.append(toks)
        allp = torch.cat(probs)
        out["workloads"][name] = {"prompts": len(prompts), "positions": int(allp.numel()),
                                  "mean_top1_prob": float(allp.mean()), "median_top1_prob": float(allp.median()),
                                  **{f"share_above_{t}": float((allp > t).float().mean()) for t in THRESHOLDS},
                                  "draft_vocab_coverage": {Path(h).name: token_coverage(t2d, outputs)[0]
                                                           for h, t2d in vocabs.items()}}
        print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in out["workloads"][name].items()},
              flush=True)
    write_json(Path(args.out), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

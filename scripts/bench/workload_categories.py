"""Where do the heads accept least? Acceptance per prompt category of a benchmark workload.

The chat workload mixes eight categories (writing, roleplay, reasoning, math, coding, extraction, STEM,
humanities). This decodes each prompt greedily with plain decoding (stopping at the end of sequence, as
the training evaluation does), then measures each head's acceptance along that text with the real engine
(``bench.forced.acceptance_on_text``: the target forced to the text, so every head is judged on the same
tokens), and reports AL = 1 + accepted / drafts per category and overall. A category far below the
others is one the training data covers badly (or one that is hard to draft at all).

To tell those two apart, each category also gets the target's own confidence along its text (the mean
probability the target gives the token it chose), and ``--data DIR`` adds the held-out prompts of a
training-data folder as categories ``heldout/<domain>``, decoded the same way. ``by_confidence`` then
compares the two sets' per-request AL within bands of target confidence: text the target itself is
unsure of is hard to draft whatever the data, so a gap that remains at equal confidence is the one that
training data could close.

    python scripts/bench/workload_categories.py --cases peagle:8 eagle3:4 --out categories.json   # CPU, ~10 min
    python scripts/bench/workload_categories.py --cases peagle:8 --data DATA --out gap.json        # + held-out
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
from peagle_lab.config import SpecConfig, parse_case  # noqa: E402
from peagle_lab.engine import SpecDecoder  # noqa: E402
from peagle_lab.models.checkpoints import write_json  # noqa: E402
from peagle_lab.provenance import run_info  # noqa: E402


@torch.no_grad()
def target_confidence(target, prompt: list[int], output: list[int]) -> float:
    """The mean probability the target gives each token of ``output`` after ``prompt`` (one forward)."""
    ids = torch.tensor([prompt + output], device=target.device)
    pos = torch.arange(ids.shape[1], device=target.device)[None]
    rows = torch.arange(len(prompt) - 1, ids.shape[1] - 1, device=target.device)[None]
    logits = target(ids, pos, return_taps=False, logits_rows=rows).logits[0].float()  # [len(output), V]
    probs = logits.softmax(-1).gather(-1, torch.tensor(output, device=target.device)[:, None])
    return float(probs.mean())


def category_acceptance(target, drafter, spec: SpecConfig, by_category: dict[str, list[tuple[list[int], list[int]]]]
                        ) -> dict:
    """AL per category (and overall) of ``drafter`` along the given (prompt, output) pairs, and per request."""
    out, drafts, accepted, requests = {}, 0, 0, []
    for name, pairs in sorted(by_category.items()):
        pairs = [(p, o) for p, o in pairs if o]  # an empty output has nothing to draft
        if not pairs:
            continue
        r = acceptance_on_text(target, drafter, spec, [p for p, _ in pairs], [o for _, o in pairs])
        conf = [target_confidence(target, p, o) for p, o in pairs]
        out[name] = {"acceptance_length": r["acceptance_length"], "num_drafts": r["num_drafts"],
                     "num_accepted_tokens": r["num_accepted_tokens"], "requests": len(pairs),
                     "output_tokens": sum(len(o) for _, o in pairs), "target_confidence": sum(conf) / len(conf)}
        requests += [{"category": name, "al": al, "target_confidence": c, "output_tokens": len(o)}
                     for al, c, (_, o) in zip(r["per_request_al"], conf, pairs)]
        drafts, accepted = drafts + r["num_drafts"], accepted + r["num_accepted_tokens"]
    return {"categories": out, "acceptance_length": acceptance_length(accepted, drafts), "num_drafts": drafts,
            "num_accepted_tokens": accepted, "requests": requests, "by_confidence": by_confidence(requests)}


BANDS = (0.0, 0.6, 0.7, 0.8, 0.9, 1.0001)  # target-confidence bands of by_confidence


def by_confidence(requests: list[dict]) -> list[dict]:
    """Mean per-request AL of the workload's and the held-out requests within each confidence band."""
    rows = []
    for lo, hi in zip(BANDS, BANDS[1:]):
        row = {"band": [lo, min(hi, 1.0)]}
        for side, held in (("workload", False), ("heldout", True)):
            als = [r["al"] for r in requests
                   if lo <= r["target_confidence"] < hi and r["category"].startswith("heldout/") == held]
            row[side] = {"requests": len(als), "mean_al": sum(als) / len(als) if als else None}
        rows.append(row)
    return rows


def heldout_pairs(data_dir: str, n: int) -> dict[str, list[list[int]]]:
    """Up to ``n`` held-out prompts of a training-data folder, spread over its domains in file order."""
    from peagle_lab.train.data_files import load_split

    by_domain = defaultdict(list)
    for ex in load_split(data_dir, "heldout"):
        by_domain[f"heldout/{ex.domain or ex.source}"].append(list(ex.prompt_ids))
    picked, names = defaultdict(list), sorted(by_domain)
    while sum(map(len, picked.values())) < n and any(by_domain[d] for d in names):
        for d in names:  # round-robin, so a small domain is not crowded out
            if by_domain[d] and sum(map(len, picked.values())) < n:
                picked[d].append(by_domain[d].pop(0))
    return picked


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="chat", choices=["chat", "code"])
    p.add_argument("--prompts", type=int, default=80)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--cases", nargs="+", default=["peagle:8", "eagle3:4"], help="METHOD:K each")
    p.add_argument("--eagle3-head", help="an EAGLE-3 head folder (default: the bundled one)")
    p.add_argument("--peagle-head", help="a P-EAGLE head folder (default: the bundled one)")
    p.add_argument("--data", help="a training-data folder: its held-out prompts join as categories heldout/<domain>")
    p.add_argument("--data-prompts", type=int, default=80, help="held-out prompts to take from --data")
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
    cats = [q.category for q in prompts]
    if args.data:
        for name, more in heldout_pairs(args.data, args.data_prompts).items():
            ids, cats = ids + more, cats + [name] * len(more)
    outputs = plain.generate(ids).tokens  # the target's own EOS ends each one
    by_category = defaultdict(list)
    for c, i, o in zip(cats, ids, outputs):
        by_category[c].append((i, o))
    doc = {"what": "AL per prompt category along the target's greedy text (stopping at EOS), each head judged on "
                   "the same tokens (bench.forced.acceptance_on_text), float32",
           "workload": args.workload, "prompts": len(ids), "max_new_tokens": args.max_new_tokens, "data": args.data,
           "heads": {} if args.tiny else paths, "cases": {}, **run_info()}
    for method, k in cases:
        t0 = time.perf_counter()
        got = category_acceptance(target, heads[method], SpecConfig(method=method, num_speculative_tokens=k), by_category)
        doc["cases"][f"{method}:{k}"] = got
        row = "  ".join(f"{n} {v['acceptance_length']:.2f} ({v['target_confidence']:.2f})"
                        for n, v in got["categories"].items())
        print(f"{method} K={k}: AL {got['acceptance_length']:.3f} | {row} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
        for b in got["by_confidence"]:
            cells = "  ".join(f"{side} {b[side]['mean_al'] or float('nan'):.2f} ({b[side]['requests']})"
                              for side in ("workload", "heldout"))
            print(f"  target confidence {b['band'][0]:.1f}-{b['band'][1]:.1f}: {cells}", flush=True)
        write_json(Path(args.out), doc)  # after every case: a long CPU run that is stopped keeps what it finished
    return 0


if __name__ == "__main__":
    sys.exit(main())

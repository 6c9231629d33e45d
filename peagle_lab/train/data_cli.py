"""``peagle-lab train-data``: synthesise a training data folder (one process, or every rank of torchrun)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..devices import resolve_device
from .cli_common import common_arguments, load_target, reports_errors


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``peagle-lab train-data`` (also under ``torchrun --nproc-per-node N``: one GPU per rank)."""
    from .data import DataConfig

    d = DataConfig()
    common_arguments(p)
    p.add_argument("--out", required=True, help="data folder to write (shards + card)")
    p.add_argument("--tiny", action="store_true", help="tiny random target + character tokenizer (CPU smoke run)")
    p.add_argument("--num-magpie", type=int, default=d.num_magpie, help="Magpie user turns to sample (all ranks)")
    p.add_argument("--opening-weight", type=int, default=d.opening_weight,
                   help="weight of Magpie turns begun with a hand-written request's first words (the 11 domain "
                        "system prompts weigh 13 together; 0: none)")
    p.add_argument("--max-code-prompts", type=int, default=d.max_code_prompts)
    p.add_argument("--max-math-prompts", type=int, default=d.max_math_prompts)
    p.add_argument("--max-writing-prompts", type=int, default=d.max_writing_prompts)
    p.add_argument("--response-max-tokens", type=int, default=d.response_max_tokens)
    p.add_argument("--sampled-fraction", type=float, default=d.sampled_fraction,
                   help="training prompts that also get a sampled response (every prompt gets a greedy one)")
    p.add_argument("--multi-turn-fraction", type=float, default=d.multi_turn_fraction,
                   help="training prompts continued by a Magpie follow-up turn and a greedy second response")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="requests decoded together (per rank)")
    p.add_argument("--heldout-fraction", type=float, default=d.heldout_fraction)
    p.add_argument("--shard-rows", type=int, default=d.shard_rows, help="rows per JSONL shard")
    p.add_argument("--time-budget-s", type=float, default=None, help="admit no new prompt after this many seconds")
    p.add_argument("--target-tokens", type=int, default=None,
                   help="stop once the ranks generated about this many tokens (held-out and greedy first)")
    p.add_argument("--exclude-file", action="append", default=[],
                   help="prompts never to train on: text (one per line) or JSONL with 'prompt'/'text'; repeatable")


def read_exclusions(paths: list[str]) -> list[str]:
    """Prompt texts from exclusion files (plain lines, or JSONL objects with ``prompt``/``text``)."""
    out = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            if path.endswith(".jsonl"):
                obj = json.loads(line)
                out.append(obj.get("prompt") or obj.get("text") or "")
            else:
                out.append(line)
    return out


@reports_errors
def run_data(args) -> int:
    """Synthesise a training data folder (one process, or every rank of a torchrun job); returns the exit status."""
    from .data import DataConfig, synthesize
    from .dist import init_distributed, shutdown

    cfg = DataConfig(num_magpie=args.num_magpie, opening_weight=args.opening_weight, max_code_prompts=args.max_code_prompts,
                     max_math_prompts=args.max_math_prompts, max_writing_prompts=args.max_writing_prompts,
                     response_max_tokens=args.response_max_tokens, sampled_fraction=args.sampled_fraction,
                     multi_turn_fraction=args.multi_turn_fraction, concurrency=args.concurrency,
                     heldout_fraction=args.heldout_fraction, shard_rows=args.shard_rows, seed=args.seed,
                     time_budget_s=args.time_budget_s, target_tokens=args.target_tokens)
    exclude = read_exclusions(args.exclude_file)  # bad input fails on every rank before any rank waits on another
    info = init_distributed(resolve_device(args.device))
    try:
        args.device = str(info.device)  # under torchrun: this rank's GPU
        target, tok, name = load_target(args)
        if tok is None:
            from .tiny import CharTokenizer

            tok = CharTokenizer()
        card = synthesize(target, tok, cfg, args.out, exclude, name, progress=not args.no_progress and info.is_main)
    finally:
        shutdown()
    if info.is_main:
        print(json.dumps({"world_size": card["world_size"], "splits": card["splits"], "timings_s": card["timings_s"],
                          "tokens_per_s": card["throughput"]["total"]["tokens_per_s"]}, indent=2))
    return 0

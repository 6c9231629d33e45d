"""``peagle-lab train`` and ``train-eval``: train a head (one process or torchrun), measure and export it.

Under ``torchrun --nproc-per-node N`` every rank trains on its share of each batch (DDP);
rank 0 writes the run folder. A warm start (``--init-from HEAD``) continues a shipped or
earlier head: its weights and draft vocabulary, a fresh schedule, and the token passes it
had already seen, which the new head's summary and model card carry forward.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..config import COMPILE_MODES, DEFAULT_SLIDING_WINDOW, parse_window
from .cli_common import command_line, common_arguments, load_target, reports_errors

DEFAULT_DRAFT_VOCAB = 8192  # a fresh head's draft vocabulary: 96 % of SmolLM2's training assistant tokens


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``peagle-lab train --method {eagle3,peagle} ...``."""
    from .loop import TrainConfig

    c = TrainConfig()
    common_arguments(p)
    p.add_argument("--method", required=True, choices=["eagle3", "peagle"])
    p.add_argument("--data", default=None, help="data folder from train-data (not needed with --tiny)")
    p.add_argument("--out", required=True, help="run folder: log.jsonl, checkpoints/, head/, summary.json")
    p.add_argument("--tiny", action="store_true", help="random tiny target + random-prompt data (CPU smoke run)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--init-from", default=None,
                   help="warm start: a head folder (speculators format) whose weights and vocabulary to continue")
    p.add_argument("--layers", type=int, default=1, help="drafter layers of a fresh head")
    p.add_argument("--sliding-window", metavar="N|none", default=None,
                   help="the drafting attention window the head declares (default: the warm-start head's, "
                        f"else {DEFAULT_SLIDING_WINDOW}; training itself does not apply it)")
    p.add_argument("--draft-vocab-size", type=int, default=None,
                   help=f"draft vocabulary of a fresh head (default {DEFAULT_DRAFT_VOCAB}); with --init-from, grow the "
                        "head's to this size: its ids plus the data's most frequent others, new lm_head rows at zero")
    p.add_argument("--intermediate-size", type=int, default=None,
                   help="MLP width of a fresh head (default: the target's); with --init-from, widen the head's MLPs to "
                        "this size: its units plus new ones whose output columns start at zero")
    p.add_argument("--init-head", default="random", choices=["random", "target"],
                   help="a fresh head's norm + lm_head start random or as the target's (restricted) head")
    p.add_argument("--steps", type=int, default=c.steps, help="optimiser steps (unless --time-budget-s)")
    p.add_argument("--time-budget-s", type=float, default=None,
                   help="train this long: a few timed steps decide the step count, then the schedule is fixed")
    p.add_argument("--lr", type=float, default=c.lr, help="peak learning rate")
    p.add_argument("--schedule", default=c.schedule, choices=["wsd", "cosine"])
    p.add_argument("--warmup-fraction", type=float, default=c.warmup_fraction)
    p.add_argument("--decay-fraction", type=float, default=c.decay_fraction, help="wsd: share of steps decaying")
    p.add_argument("--min-lr-ratio", type=float, default=c.min_lr_ratio)
    p.add_argument("--batch-size", type=int, default=c.batch_size, help="packed rows per step, over all ranks")
    p.add_argument("--row-len", type=int, default=c.row_len, help="tokens per packed row")
    p.add_argument("--k-train", type=int, default=None, help="P-EAGLE depths / EAGLE-3 TTT steps (default 8 / 7)")
    p.add_argument("--cod-ratio", type=float, default=c.cod_ratio, help="COD r")
    p.add_argument("--cod-ratio-min", type=float, default=c.cod_ratio_min, help="COD r_min")
    p.add_argument("--depth-decay", type=float, default=None,
                   help="depth d weighs DECAY**d in the loss (default 0.8 eagle3, 1.0 peagle)")
    p.add_argument("--top1-weight", type=float, default=None, metavar="LAMBDA",
                   help="add LAMBDA x the hard cross-entropy of the target's most likely draft token to each "
                        "element's soft cross-entropy (the token a greedy draft must hit; default: soft only)")
    p.add_argument("--log-every", type=int, default=c.log_every)
    p.add_argument("--ckpt-every", type=int, default=c.ckpt_every)
    p.add_argument("--eval-every", type=int, default=c.eval_every, help="a held-out learning-curve point every N")
    p.add_argument("--heldout-rows", type=int, default=c.heldout_rows, help="packed held-out rows per curve point")
    p.add_argument("--no-eval", action="store_true", help="skip the engine's acceptance evaluation at the end")
    p.add_argument("--eval-ks", default="3,5,7")
    p.add_argument("--eval-prompts", type=int, default=c.eval_prompts)
    p.add_argument("--eval-max-new-tokens", type=int, default=c.eval_max_new_tokens)
    p.add_argument("--amp", default=c.amp, choices=["auto", "bf16", "off"])
    p.add_argument("--compile", default=c.compile, choices=COMPILE_MODES, help="torch.compile the step")
    p.add_argument("--compile-cache", default=None, metavar="FILE",
                   help="load torch.compile's caches from FILE before the first step (if it exists) and write "
                        "what this run compiled back to it at the end: a later machine skips most compilation")
    p.add_argument("--head-dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of out/head")
    p.add_argument("--tiny-examples", type=int, default=96, help="--tiny: training sequences to generate")
    p.add_argument("--exclude-domains", nargs="+", metavar="DOMAIN", default=None,
                   help="train without the examples of these domains (a Magpie domain such as openings, or a "
                        "source: code, math, writing): a data ablation beside a run on the whole folder; the "
                        "held-out split stays whole")


def _train_data(args, target):
    if args.data:
        from .data import drop_domains, load_split

        card_file = Path(args.data) / "card.json"
        card = json.loads(card_file.read_text()) if card_file.is_file() else None
        train = load_split(args.data, "train")
        if args.exclude_domains:
            train, dropped = drop_domains(train, args.exclude_domains)
            print(f"--exclude-domains: left out {dropped} ({sum(dropped.values())} examples); "
                  f"training on {len(train)}", flush=True)
        return train, load_split(args.data, "heldout"), card
    from .tiny import tiny_examples

    return tiny_examples(target, args.tiny_examples, args.seed), tiny_examples(target, 8, args.seed + 1), None


def prior_training(head_dir: Path | str) -> dict:
    """What a warm-start head had been trained on: ``{"tokens", "steps", "runs"}`` (zeros if unknown)."""
    f = Path(head_dir) / "summary.json"
    if not f.is_file():
        return {"tokens": 0, "steps": 0, "runs": []}
    s = json.loads(f.read_text())
    cum = s.get("cumulative") or {"tokens": s.get("tokens", 0), "steps": s.get("steps", 0), "runs": []}
    return {"tokens": int(cum.get("tokens", 0)), "steps": int(cum.get("steps", 0)), "runs": list(cum.get("runs", []))}


def _drafter(args, target, train, window: int | None | bool = False):
    """A fresh drafter (vocabulary from the data) or the warm-start head; and its prior training.

    ``window``: the drafting window the head declares (False: the warm-start head's, else the default).
    """
    drafter, coverage, prior = _new_or_warm_drafter(args, target, train)
    if window is False and not args.init_from:
        window = DEFAULT_SLIDING_WINDOW
    if window is not False:
        drafter.config = dataclasses.replace(drafter.config, sliding_window=window)
    return drafter, coverage, prior


def _new_or_warm_drafter(args, target, train):
    from ..heads.io import load_head
    from .build import grow_draft_vocab, grow_intermediate, new_drafter
    from .vocab import build_draft_vocab, count_tokens

    V = target.config.vocab_size
    if args.init_from:
        drafter = load_head(args.init_from, target, dtype=torch.float32, device=target.device)
        if drafter.config.method != args.method:
            raise ValueError(f"--init-from {args.init_from} is a {drafter.config.method} head; --method is {args.method}")
        counts = count_tokens(train, V)
        if args.draft_vocab_size is not None:
            drafter, _ = grow_draft_vocab(drafter, counts, args.draft_vocab_size, target.config.eos_token_ids)
        if args.intermediate_size is not None:
            drafter = grow_intermediate(drafter, args.intermediate_size, seed=args.seed)
        coverage = float(counts[drafter.t2d.cpu()].sum()) / max(int(counts.sum()), 1)
        return drafter, coverage, prior_training(args.init_from)
    size = DEFAULT_DRAFT_VOCAB if args.draft_vocab_size is None else args.draft_vocab_size
    vocab = build_draft_vocab(count_tokens(train, V), min(size, V), target.config.eos_token_ids)
    drafter = new_drafter(target, args.method, args.layers, vocab, seed=args.seed,
                          init_from_target=args.init_head == "target", intermediate_size=args.intermediate_size)
    return drafter, vocab.coverage, {"tokens": 0, "steps": 0, "runs": []}


def _run_with_compile_cache(trainer, args, is_main: bool):
    """``trainer.run()`` between loading and saving ``--compile-cache`` (when the step is compiled).

    Returns ``(result, cache)``: ``cache`` None without a cache, else what was loaded and saved.
    """
    from .compile_cache import load_compile_cache, save_compile_cache

    if not (args.compile_cache and trainer.compiled):
        return trainer.run(resume=args.resume), None
    cache = {"loaded": load_compile_cache(args.compile_cache)}
    if "error" in cache["loaded"]:
        print(f"{cache['loaded']['error']}; compiling from scratch", flush=True)
    result = trainer.run(resume=args.resume)
    if is_main and trainer.compiled:  # an eager fallback has nothing worth keeping
        cache["saved"] = save_compile_cache(args.compile_cache)
        print(f"compile cache: loaded {cache['loaded']['bytes']} bytes, saved {cache['saved']['bytes']} bytes "
              f"to {args.compile_cache}", flush=True)
    return result, cache


def _train_config(args) -> "TrainConfig":
    """The ``TrainConfig`` the arguments ask for, after the checks that need nothing loaded."""
    from .loop import TrainConfig

    if not args.data and not args.tiny:
        raise ValueError("--data is required (a folder from train-data), unless --tiny")
    if args.intermediate_size is not None and args.intermediate_size < 1:
        raise ValueError(f"--intermediate-size {args.intermediate_size} is not a positive MLP width")
    if args.exclude_domains and not args.data:
        raise ValueError(f"--exclude-domains {' '.join(args.exclude_domains)} needs --data (the --tiny data has "
                         "no domains)")
    k_train = args.k_train or (7 if args.method == "eagle3" else 8)
    return TrainConfig(
        method=args.method, steps=args.steps, time_budget_s=args.time_budget_s, lr=args.lr, schedule=args.schedule,
        warmup_fraction=args.warmup_fraction, decay_fraction=args.decay_fraction, min_lr_ratio=args.min_lr_ratio,
        batch_size=args.batch_size, row_len=args.row_len, k_train=k_train, cod_ratio=args.cod_ratio,
        cod_ratio_min=args.cod_ratio_min, depth_decay=args.depth_decay, top1_weight=args.top1_weight,
        seed=args.seed, log_every=args.log_every,
        ckpt_every=args.ckpt_every, eval_every=args.eval_every, heldout_rows=args.heldout_rows,
        eval_at_end=not args.no_eval, eval_ks=tuple(int(k) for k in args.eval_ks.split(",")),
        eval_prompts=args.eval_prompts, eval_max_new_tokens=args.eval_max_new_tokens, amp=args.amp,
        compile=args.compile)


@reports_errors
def run_train(args) -> int:
    """Train one head as ``args`` say; rank 0 writes the run folder; returns the exit status."""
    from ..devices import resolve_device
    from ..heads.io import save_head
    from .dist import init_distributed, shutdown
    from .evaluate import model_card, reports_from_json
    from .loop import PrintEvery, Trainer

    t0 = time.monotonic()
    cfg = _train_config(args)
    window = parse_window(args.sliding_window, "--sliding-window")
    dist = init_distributed(resolve_device(args.device))
    args.device = str(dist.device)
    target, _, name = load_target(args)  # after the config checks: fail fast, before loading anything
    train, heldout, data_card = _train_data(args, target)
    drafter, coverage, prior = _drafter(args, target, train, window)
    out = Path(args.out)
    callbacks = [PrintEvery()] if args.no_progress else []
    trainer = Trainer(target, drafter, train, cfg, out, heldout, callbacks, progress=not args.no_progress, dist=dist)
    result, cache = _run_with_compile_cache(trainer, args, dist.is_main)
    if dist.is_main:
        reports = reports_from_json(result.eval.get("acceptance", []))
        this_run = {"tokens": result.tokens, "steps": result.steps, "method": args.method, "command": command_line(args)}
        summary = {
            "target": name, "method": args.method, "num_hidden_layers": drafter.config.num_hidden_layers,
            "draft_vocab_size": drafter.config.draft_vocab_size, "intermediate_size": drafter.config.intermediate_size,
            "vocab_coverage": coverage, "config": asdict(cfg),
            "steps": result.steps, "wall_s": result.wall_s, "process_s": time.monotonic() - t0,
            "device": str(target.device), "world_size": dist.world_size, "torch": torch.__version__,
            "compiled": trainer.compiled, "tokens": result.tokens, "tokens_per_s": result.tokens_per_s,
            "first_loss": result.first_loss, "last_loss": result.last_loss,
            "heldout_loss": result.curve[-1]["loss"] if result.curve else float("nan"),
            "depth_acc": list(result.last.depth_acc) if result.last else [],
            "heldout_depth_acc": result.curve[-1]["depth_acc"] if result.curve else None,
            "curve": result.curve, "acceptance": result.eval.get("acceptance", []),
            "warm_start": args.init_from, "prior": prior, "first_step_s": result.first_step_s, "compile_cache": cache,
            "cumulative": {"tokens": prior["tokens"] + result.tokens, "steps": prior["steps"] + result.steps,
                           "runs": prior["runs"] + [this_run]},
            "command": command_line(args), "data": args.data, "train_examples": len(train),
            "heldout_examples": len(heldout), "data_card": card_digest(data_card),
            "excluded_domains": args.exclude_domains or [],
        }
        head_dtype = torch.bfloat16 if args.head_dtype == "bfloat16" else torch.float32
        save_head(drafter, out / "head", dtype=head_dtype,
                  card=model_card(summary, reports, data_card, drafter.config.sliding_window))
        (out / "head" / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        print(json.dumps({k: summary[k] for k in ("method", "num_hidden_layers", "steps", "wall_s", "tokens",
                                                  "tokens_per_s", "first_loss", "last_loss", "heldout_loss")},
                         default=str))
        for r in reports:
            print(f"K={r.k} AL={r.acceptance_length:.3f} per-position={[round(a, 3) for a in r.per_position_acceptance]}")
    shutdown()
    return 0


# ---------------------------------------------------------------------------- eval / export
def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``peagle-lab train-eval``: measure trained runs' heads and export them."""
    common_arguments(p)
    p.add_argument("--run", required=True, nargs="+", help="run folders written by train (head/ + summary.json)")
    p.add_argument("--data", required=True, help="the data folder (its held-out split is evaluated)")
    p.add_argument("--export", required=True, help="write each evaluated head to EXPORT/<run folder name>")
    p.add_argument("--tiny", action="store_true", help="the runs were trained on the tiny random target")
    p.add_argument("--head-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    p.add_argument("--eval-ks", default="3,5,7")
    p.add_argument("--eval-prompts", type=int, default=128)
    p.add_argument("--eval-max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--workloads", default="",
                   help="also measure on benchmark workloads no training saw, e.g. 'chat,code' (comma-separated)")
    p.add_argument("--workload-ks", default="3,7", help="the K values measured on --workloads")


def _baseline_tps(target, prompts: list, max_new_tokens: int, concurrency: int) -> float:
    """Plain decoding's output tokens per second on ``prompts`` (the TPS reference of a card)."""
    from ..config import SpecConfig
    from ..engine import SpecDecoder

    busy = out_tokens = 0.0
    for start in range(0, len(prompts), concurrency):
        m = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=max_new_tokens)).generate(
            prompts[start:start + concurrency]).metrics
        busy, out_tokens = busy + m.prefill_s + m.decode_s, out_tokens + m.output_tokens
    return out_tokens / busy if busy else 0.0


def card_digest(card: dict | None) -> dict | None:
    """The part of a data card that a model card quotes (kept in each head's summary).

    >>> card_digest({"seed": 0, "argv": ["…"], "splits": {"train": {"examples": 2, "tokens": 9, "by_domain": {}},
    ...                                                  "heldout": {"prompts": 1, "tokens": 4}}})
    {'seed': 0, 'splits': {'train': {'examples': 2, 'tokens': 9}, 'heldout': {'prompts': 1}}}
    """
    if not card:
        return None
    keep = {"train": ("examples", "tokens", "greedy_token_share", "by_source", "multi_turn"), "heldout": ("prompts",)}
    splits = card.get("splits") or {}
    return {"seed": card.get("seed"),
            "splits": {s: {k: splits[s][k] for k in ks if k in splits.get(s, {})} for s, ks in keep.items()}}


def trained_on(summary: dict, data_card: dict | None) -> dict | None:
    """The data card of the data a head was trained on, for its model card; None if unknown.

    A head evaluated on another session's data (``EVAL_HEADS``) must not inherit that data's card:
    its summary's own card wins, and without one the given card is used only when its training
    split has exactly as many sequences as the run trained on.

    >>> card = {"seed": 0, "splits": {"train": {"examples": 3}}}
    >>> trained_on({"train_examples": 3}, card)["splits"]["train"], trained_on({"train_examples": 5}, card)
    ({'examples': 3}, None)
    >>> trained_on({"data_card": {"seed": 1}, "train_examples": 3}, card)
    {'seed': 1}
    """
    if summary.get("data_card"):
        return summary["data_card"]
    examples = ((data_card or {}).get("splits") or {}).get("train", {}).get("examples")
    return card_digest(data_card) if examples is not None and examples == summary.get("train_examples") else None


@reports_errors
def run_eval(args) -> int:
    """Evaluate every ``--run``'s head on the held-out prompts; export each with its model card."""
    from ..heads.io import load_head, save_head
    from .data import load_split
    from .evaluate import evaluate_acceptance, heldout_prompts, model_card, reports_table, reports_to_json
    from .loop import Trainer, TrainConfig

    target, tok, _ = load_target(args)
    heldout = load_split(args.data, "heldout")
    prompts = heldout_prompts(heldout, args.eval_prompts)
    if not prompts:
        raise ValueError(f"{args.data} has no held-out prompts to evaluate on")
    workloads = {}
    for name in [w for w in args.workloads.split(",") if w]:
        from ..bench.workloads import HashTokenizer, load_workload

        size = {"chat": 80, "code": 164}.get(name, 64)
        tk = tok if tok is not None else HashTokenizer(target.config.vocab_size)
        workloads[name] = [list(p.token_ids) for p in load_workload(name, size, tokenizer=tk)]
    baseline_tps = _baseline_tps(target, prompts, args.eval_max_new_tokens, args.concurrency)
    card_file = Path(args.data) / "card.json"
    data_card = json.loads(card_file.read_text()) if card_file.is_file() else None
    dtype = torch.bfloat16 if args.head_dtype == "bfloat16" else torch.float32
    ks = tuple(int(k) for k in args.eval_ks.split(","))
    for run in map(Path, args.run):
        summary = json.loads((run / "summary.json").read_text())
        drafter = load_head(run / "head", target, dtype=torch.float32, device=target.device)
        if not summary.get("curve"):  # training recorded none: score the held-out rows now
            conf = {**summary["config"], "eval_ks": tuple(summary["config"]["eval_ks"]), "compile": "off",
                    "heldout_rows": summary["config"].get("heldout_rows") or 16}
            cfg = TrainConfig(**{k: v for k, v in conf.items() if k in TrainConfig.__dataclass_fields__})
            held = Trainer(target, drafter, heldout, cfg, run, heldout, progress=False).heldout_stats()
            summary.update(heldout_loss=held.loss, heldout_depth_acc=list(held.depth_acc))
        reports = evaluate_acceptance(target, drafter, prompts, ks, args.eval_max_new_tokens, args.concurrency)
        summary.update(acceptance=reports_to_json(reports), eval_device=str(target.device),
                       eval_command=command_line(args), baseline_tps=baseline_tps, eval_concurrency=args.concurrency)
        wks = tuple(int(k) for k in args.workload_ks.split(","))
        summary["workloads"] = {name: reports_to_json(evaluate_acceptance(
            target, drafter, wp, wks, args.eval_max_new_tokens, args.concurrency)) for name, wp in workloads.items()}
        export = Path(args.export) / run.name
        summary["data_card"] = trained_on(summary, data_card)
        save_head(drafter, export, dtype=dtype,
                  card=model_card(summary, reports, summary["data_card"], drafter.config.sliding_window))
        (export / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        print(f"{run.name}: {summary['method']}, {summary['num_hidden_layers']} layer(s), {summary['steps']} steps, "
              f"held-out loss {summary['heldout_loss']:.3f}, {len(prompts)} held-out prompts "
              f"(plain decoding: {baseline_tps:.0f} tok/s)")
        print(reports_table(reports), flush=True)
        for name, rows in summary["workloads"].items():
            print(f"{name}: " + ", ".join(f"K={r['k']} AL {r['acceptance_length']:.3f}" for r in rows), flush=True)
    return 0

"""Command-line entry points: ``train-data`` (synthesise), ``train`` and ``train-eval`` (measure + export).

``peagle_lab.cli`` mounts ``add_*_arguments`` / ``run_*``; ``python -m peagle_lab.train.cli
{data,train,eval} ...`` runs them directly. ``--tiny`` swaps in a random tiny target and
random-prompt data, so the whole path runs on a CPU in seconds.
"""
from __future__ import annotations

import argparse
import functools
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..bench.cli import _device  # one device parser for every subcommand


def _reports_errors(run):
    """``run_*`` return 2 and print the message for bad input (ValueError), like the rest of the CLI."""
    @functools.wraps(run)
    def wrapper(args) -> int:
        try:
            return run(args)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return wrapper


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_target(args) -> tuple[object, object, str]:
    """``(target, tokenizer or None, name)`` for ``--tiny`` / ``--model`` / the default SmolLM2."""
    device = _device(args.device)
    if getattr(args, "tiny", False):
        from ..testing import tiny_target

        model = tiny_target(seed=0).to(device=device, dtype=_dtype(args.dtype, device))
        return model, None, "tiny random target (peagle_lab.testing.tiny_target)"
    from ..zoo import DEFAULT, load_model

    model, tok = load_model(args.model, _dtype(args.dtype, device), device, quiet=False)
    return model.eval(), tok, Path(args.model).name if args.model else DEFAULT.name


def command_line(args=None) -> str:
    """The command that produced ``args``, as someone would retype it."""
    if getattr(args, "command_line", None):
        return args.command_line
    prog = Path(sys.argv[0]).name
    head = ["python", "-m", "peagle_lab.train.cli"] if prog in ("cli.py", "-c") else [prog]
    return shlex.join(head + sys.argv[1:])


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="target HF folder or GGUF (default: the embedded SmolLM2)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="target dtype (auto: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no tqdm bars (logs only)")


# ---------------------------------------------------------------------------- data
def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``peagle-lab train-data``."""
    from .data import DataConfig

    d = DataConfig()
    _common(p)
    p.add_argument("--out", required=True, help="data folder to write (shards + card)")
    p.add_argument("--tiny", action="store_true", help="tiny random target + character tokenizer (CPU smoke run)")
    p.add_argument("--num-magpie", type=int, default=d.num_magpie, help="Magpie user turns to sample")
    p.add_argument("--max-code-prompts", type=int, default=d.max_code_prompts)
    p.add_argument("--response-max-tokens", type=int, default=d.response_max_tokens)
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="requests decoded together")
    p.add_argument("--heldout-fraction", type=float, default=d.heldout_fraction)
    p.add_argument("--time-budget-s", type=float, default=None, help="stop starting generation chunks after this")
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


@_reports_errors
def run_data(args) -> int:
    """Synthesise a training data folder; returns the exit status."""
    from .data import DataConfig, synthesize

    cfg = DataConfig(num_magpie=args.num_magpie, max_code_prompts=args.max_code_prompts,
                     response_max_tokens=args.response_max_tokens, concurrency=args.concurrency,
                     heldout_fraction=args.heldout_fraction, seed=args.seed, time_budget_s=args.time_budget_s)
    target, tok, name = load_target(args)
    if tok is None:
        from .tiny import CharTokenizer

        tok = CharTokenizer()
    card = synthesize(target, tok, cfg, args.out, read_exclusions(args.exclude_file), name,
                      progress=not args.no_progress)
    print(json.dumps({"splits": card["splits"], "timings_s": card["timings_s"]}, indent=2))
    return 0


# ---------------------------------------------------------------------------- train
def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``peagle-lab train --method {eagle3,peagle} ...``."""
    from .loop import TrainConfig

    c = TrainConfig()
    _common(p)
    p.add_argument("--method", required=True, choices=["eagle3", "peagle"])
    p.add_argument("--data", default=None, help="data folder from train-data (not needed with --tiny)")
    p.add_argument("--out", required=True, help="run folder: log.jsonl, checkpoints/, head/, summary.json")
    p.add_argument("--tiny", action="store_true", help="random tiny target + random-prompt data (CPU smoke run)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--layers", type=int, default=None, help="drafter layers (default: 1 eagle3, 2 peagle)")
    p.add_argument("--draft-vocab-size", type=int, default=8192)
    p.add_argument("--init-head", default="random", choices=["random", "target"],
                   help="drafter norm + lm_head start random or as the target's (restricted) head")
    p.add_argument("--steps", type=int, default=c.steps)
    p.add_argument("--lr", type=float, default=c.lr)
    p.add_argument("--warmup-steps", type=int, default=c.warmup_steps)
    p.add_argument("--batch-size", type=int, default=c.batch_size)
    p.add_argument("--max-seq-len", type=int, default=c.max_seq_len)
    p.add_argument("--k-train", type=int, default=None, help="P-EAGLE depths / EAGLE-3 TTT steps (default 8 / 7)")
    p.add_argument("--cod-ratio", type=float, default=c.cod_ratio, help="COD r")
    p.add_argument("--cod-ratio-min", type=float, default=c.cod_ratio_min, help="COD r_min")
    p.add_argument("--segments", type=int, default=c.segments, help="sequence partitioning S")
    p.add_argument("--log-every", type=int, default=c.log_every)
    p.add_argument("--ckpt-every", type=int, default=c.ckpt_every)
    p.add_argument("--eval-every", type=int, default=c.eval_every)
    p.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation at the end")
    p.add_argument("--eval-ks", default="3,5,7")
    p.add_argument("--eval-prompts", type=int, default=c.eval_prompts)
    p.add_argument("--eval-max-new-tokens", type=int, default=c.eval_max_new_tokens)
    p.add_argument("--heldout-batches", type=int, default=c.heldout_batches, help="batches for the held-out loss")
    p.add_argument("--amp", default=c.amp, choices=["auto", "bf16", "off"])
    p.add_argument("--time-budget-s", type=float, default=None, help="train for this long (cosine follows the clock)")
    p.add_argument("--head-dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of out/head")
    p.add_argument("--tiny-examples", type=int, default=96, help="--tiny: training sequences to generate")


def _train_data(args, target):
    if args.data:
        from .data import load_split

        card_file = Path(args.data) / "card.json"
        card = json.loads(card_file.read_text()) if card_file.is_file() else None
        return load_split(args.data, "train"), load_split(args.data, "heldout"), card
    from .tiny import tiny_examples

    return tiny_examples(target, args.tiny_examples, args.seed), tiny_examples(target, 8, args.seed + 1), None


@_reports_errors
def run_train(args) -> int:
    """Train one head as ``args`` say; writes the run folder; returns the exit status."""
    from ..models.heads import save_head
    from .build import new_drafter
    from .evaluate import AcceptanceReport, model_card
    from .loop import PrintEvery, Trainer, TrainConfig
    from .vocab import build_draft_vocab, count_tokens

    t0 = time.monotonic()
    if not args.data and not args.tiny:
        raise ValueError("--data is required (a folder from train-data), unless --tiny")
    layers = args.layers or (1 if args.method == "eagle3" else 2)
    k_train = args.k_train or (7 if args.method == "eagle3" else 8)
    cfg = TrainConfig(
        method=args.method, steps=args.steps, lr=args.lr, warmup_steps=args.warmup_steps, batch_size=args.batch_size,
        max_seq_len=args.max_seq_len, k_train=k_train, cod_ratio=args.cod_ratio, cod_ratio_min=args.cod_ratio_min,
        segments=args.segments, seed=args.seed, log_every=args.log_every, ckpt_every=args.ckpt_every,
        eval_every=args.eval_every, eval_at_end=not args.no_eval,
        eval_ks=tuple(int(k) for k in args.eval_ks.split(",")), eval_prompts=args.eval_prompts,
        eval_max_new_tokens=args.eval_max_new_tokens, heldout_batches=args.heldout_batches, amp=args.amp,
        time_budget_s=args.time_budget_s)
    target, _, name = load_target(args)  # after the config checks: fail fast, before loading anything
    train, heldout, data_card = _train_data(args, target)
    V = target.config.vocab_size
    vocab = build_draft_vocab(count_tokens(train, V), min(args.draft_vocab_size, V), target.config.eos_token_ids)
    drafter = new_drafter(target, args.method, layers, vocab, seed=args.seed,
                          init_from_target=args.init_head == "target")
    out = Path(args.out)
    callbacks = [PrintEvery(cfg.log_every, cfg.steps)] if args.no_progress else []
    trainer = Trainer(target, drafter, train, cfg, out, heldout, callbacks, progress=not args.no_progress)
    result = trainer.run(resume=args.resume)
    reports = [AcceptanceReport(**r) for r in result.eval.get("acceptance", [])]
    summary = {
        "target": name, "method": args.method, "num_hidden_layers": layers,
        "draft_vocab_size": vocab.draft_to_target.numel(),
        "vocab_coverage": vocab.coverage, "config": asdict(cfg), "steps": result.steps, "wall_s": result.wall_s,
        "process_s": time.monotonic() - t0, "device": str(target.device), "torch": torch.__version__,
        "first_loss": result.first_loss, "last_loss": result.last_loss,
        "heldout_loss": result.eval.get("heldout_loss") or float("nan"),
        "depth_acc": list(result.last.depth_acc) if result.last else [],
        "heldout_depth_acc": result.eval.get("heldout_depth_acc"),
        "acceptance": result.eval.get("acceptance", []),
        "command": command_line(args),
        "data": args.data, "train_examples": len(train), "heldout_examples": len(heldout),
    }
    head_dtype = torch.bfloat16 if args.head_dtype == "bfloat16" else torch.float32
    save_head(drafter, out / "head", dtype=head_dtype, card=model_card(summary, reports, data_card))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(json.dumps({k: summary[k] for k in ("method", "num_hidden_layers", "steps", "wall_s", "first_loss",
                                              "last_loss", "heldout_loss")}, default=str))
    for r in reports:
        print(f"K={r.k} AL={r.acceptance_length:.3f} per-position={[round(a, 3) for a in r.per_position_acceptance]}")
    return 0


# ---------------------------------------------------------------------------- eval / export
def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``peagle-lab train-eval``: measure trained runs' heads and export them."""
    _common(p)
    p.add_argument("--run", required=True, nargs="+", help="run folders written by train (head/ + summary.json)")
    p.add_argument("--data", required=True, help="the data folder (its held-out split is evaluated)")
    p.add_argument("--export", required=True, help="write each evaluated head to EXPORT/<run folder name>")
    p.add_argument("--tiny", action="store_true", help="the runs were trained on the tiny random target")
    p.add_argument("--head-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    p.add_argument("--eval-ks", default="3,5,7")
    p.add_argument("--eval-prompts", type=int, default=128)
    p.add_argument("--eval-max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=128)


@_reports_errors
def run_eval(args) -> int:
    """Evaluate every ``--run``'s head on the held-out prompts; export each with its model card."""
    from ..config import SpecConfig
    from ..engine import SpecDecoder
    from ..models.heads import load_head, save_head
    from .data import load_split
    from .evaluate import evaluate_acceptance, heldout_prompts, model_card, reports_table, reports_to_json
    from .loop import TrainConfig, heldout_loss

    target, _, _ = load_target(args)
    heldout = load_split(args.data, "heldout")
    prompts = heldout_prompts(heldout, args.eval_prompts)
    if not prompts:
        raise ValueError(f"{args.data} has no held-out prompts to evaluate on")
    busy = out_tokens = 0.0
    for start in range(0, len(prompts), args.concurrency):  # plain decoding: the TPS reference
        m = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=args.eval_max_new_tokens)).generate(
            prompts[start:start + args.concurrency]).metrics
        busy, out_tokens = busy + m.prefill_s + m.decode_s, out_tokens + m.output_tokens
    baseline_tps = out_tokens / busy if busy else 0.0
    card_file = Path(args.data) / "card.json"
    data_card = json.loads(card_file.read_text()) if card_file.is_file() else None
    dtype = torch.bfloat16 if args.head_dtype == "bfloat16" else torch.float32
    for run in map(Path, args.run):
        summary = json.loads((run / "summary.json").read_text())
        drafter = load_head(run / "head", target, dtype=torch.float32, device=target.device)
        cfg = TrainConfig(**{**summary["config"], "eval_ks": tuple(summary["config"]["eval_ks"])})
        amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if target.device.type == "cuda" else None
        hl = heldout_loss(target, drafter, heldout, cfg, amp)
        summary.update(heldout_loss=hl.loss, heldout_depth_acc=list(hl.depth_acc))
        reports = evaluate_acceptance(target, drafter, prompts, tuple(int(k) for k in args.eval_ks.split(",")),
                                      args.eval_max_new_tokens, args.concurrency)
        summary.update(acceptance=reports_to_json(reports), eval_device=str(target.device),
                       eval_command=command_line(args), baseline_tps=baseline_tps, eval_concurrency=args.concurrency)
        export = Path(args.export) / run.name
        save_head(drafter, export, dtype=dtype, card=model_card(summary, reports, data_card))
        (export / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        print(f"{run.name}: {summary['method']}, {summary['num_hidden_layers']} layer(s), {summary['steps']} steps, "
              f"held-out loss {hl.loss:.3f}, {len(prompts)} held-out prompts (plain decoding: {baseline_tps:.0f} tok/s)")
        print(reports_table(reports), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m peagle_lab.train.cli {data,train,eval} ...``."""
    parser = argparse.ArgumentParser(prog="python -m peagle_lab.train.cli", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add, run in (("data", add_data_arguments, run_data), ("train", add_train_arguments, run_train),
                           ("eval", add_eval_arguments, run_eval)):
        sp = sub.add_parser(name)
        add(sp)
        sp.set_defaults(func=run)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["python", "-m", "peagle_lab.train.cli", *argv])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

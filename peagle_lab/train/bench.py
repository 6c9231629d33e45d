"""Training throughput: target tokens per second and model-FLOP utilisation, per method.

``peagle-lab train-bench`` builds a fresh head per method and runs real training steps
(``loop.Trainer.train_step``: target forward, elements and masks, drafter forward and
backward, AdamW) on packed rows of the data given (or random tokens of the same shape),
excludes the first steps (compilation, allocator warm-up), synchronises the device around
the timed ones, and reports the median over repeats. A second, synchronised pass splits one
step into its parts (target, step inputs, drafter + optimiser), which names what bounds it.

Model FLOPs count the matrix products: the target's forward (2 × its non-embedding weights
plus the lm_head, per token), the drafter's forward and backward (6 × its weights per
drafter row: every COD element, or every anchor of every TTT step) and the fc on the taps.
Attention is left out (a few per cent at these lengths); utilisation is against the
device's dense bf16 peak from its data sheet.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from ..config import COMPILE_MODES
from .cli_common import command_line, common_arguments, load_target, reports_errors

# Dense bf16 tensor-core peaks from the vendors' data sheets (FLOP/s, without sparsity).
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "B200": 2250e12, "A100": 312e12}


def peak_flops(device_name: str) -> float | None:
    """The data-sheet bf16 peak of a GPU named ``device_name`` (None when unknown, e.g. a CPU)."""
    return next((v for k, v in PEAK_BF16.items() if k in device_name), None)


def step_flops(target, drafter, tokens: int, drafter_rows: int) -> float:
    """Model FLOPs of one training step (see the module docstring for what counts)."""
    tc = target.config
    target_params = sum(p.numel() for n, p in target.named_parameters() if "embed_tokens" not in n)
    target_params += tc.hidden_size * tc.vocab_size  # the lm_head runs even when tied to the embeddings
    fc = drafter.fc.weight.numel()
    body = sum(p.numel() for n, p in drafter.named_parameters() if not n.startswith("fc.") and "mask_" not in n)
    return 2.0 * target_params * tokens + 6.0 * fc * tokens + 6.0 * body * drafter_rows


def random_target(device: torch.device, seed: int = 0):
    """A target of the default model's shape with random weights (bf16 on CUDA): for timing only."""
    from ..models.llama import LlamaConfig, LlamaModel

    torch.manual_seed(seed)
    model = LlamaModel(LlamaConfig())
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return model.to(device=device, dtype=dtype).eval()


def _synthetic_examples(n: int, vocab: int, seed: int) -> list:
    """Random-token chats of 200–500 tokens, a quarter prompt (for shapes only: the cost is the same)."""
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        L = int(torch.randint(200, 501, (1,), generator=g))
        out.append(SimpleNamespace(input_ids=torch.randint(3, vocab, (L,), generator=g).tolist(),
                                   assistant_start=L // 4))
    return out


def bench_method(target, method: str, examples: list, *, batch_size: int, row_len: int, layers: int,
                 draft_vocab_size: int, k_train: int, warmup: int, steps: int, compile: str, seed: int = 0,
                 cod_ratio: float = 0.7, cod_ratio_min: float = 0.2) -> dict:
    """Measure one method's training step; returns a result row.

    ``cod_ratio`` / ``cod_ratio_min`` set P-EAGLE's COD sampling (``1.0`` keeps every depth of every anchor); a
    step that runs out of GPU memory gives a row with ``"oom": true`` and the error instead of an exception.
    """
    from .build import new_drafter
    from .loop import Trainer, TrainConfig
    from .vocab import build_draft_vocab, count_tokens

    V = target.config.vocab_size
    vocab = build_draft_vocab(count_tokens(examples, V), min(draft_vocab_size, V), target.config.eos_token_ids)
    drafter = new_drafter(target, method, layers, vocab, seed=seed)
    cfg = TrainConfig(method=method, steps=warmup + steps, batch_size=batch_size, row_len=row_len, k_train=k_train,
                      compile=compile, ckpt_every=0, eval_at_end=False, heldout_rows=0, seed=seed,
                      cod_ratio=cod_ratio, cod_ratio_min=cod_ratio_min)
    import tempfile

    cod = {"cod_ratio": cod_ratio, "cod_ratio_min": cod_ratio_min} if method == "peagle" else {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            return {**_measure(Trainer(target, drafter, examples, cfg, tmp, progress=False), warmup, steps), **cod}
        except torch.cuda.OutOfMemoryError as e:
            peak = torch.cuda.max_memory_allocated() / 2 ** 30
            torch.cuda.empty_cache()
            return {"method": method, "layers": layers, "k_train": k_train, "batch_rows": batch_size,
                    "row_len": row_len, **cod, "oom": True, "peak_memory_gib": peak, "error": str(e).splitlines()[0]}


def _measure(tr, warmup: int, steps: int) -> dict:
    """Time ``warmup`` untimed and ``steps`` timed training steps of trainer ``tr``; the result row."""
    from .loop import synced_seconds

    cfg, target, drafter = tr.cfg, tr.target, tr.drafter
    method, k_train, batch_size, row_len = cfg.method, cfg.k_train, cfg.batch_size, cfg.row_len
    layers = drafter.config.num_hidden_layers
    cuda = tr.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    batches = [tr.next_rows() for _ in range(warmup + steps)]
    first = [synced_seconds(lambda b=b: tr.guarded_step(b[0], 1e-4, tr.seed_step(i)), tr.device)
             for i, b in enumerate(batches[:warmup])]
    step_s = [synced_seconds(lambda b=b: tr.train_step(b[0], 1e-4, tr.seed_step(i)), tr.device)
              for i, b in enumerate(batches[warmup:])]
    tokens = statistics.mean(t for _, t in batches[warmup:])
    med = statistics.median(step_s)
    flops = step_flops(target, drafter, tokens, batch_size * tr.builder.num_elements)
    split = _split(tr, batches[-1][0])
    name = torch.cuda.get_device_name(tr.device) if cuda else "cpu"
    peak = peak_flops(name)
    return {"method": method, "layers": layers, "k_train": k_train, "batch_rows": batch_size, "row_len": row_len,
            "compiled": tr.compiled, "tokens_per_step": tokens, "drafter_rows_per_step": batch_size * tr.builder.num_elements,
            "step_ms_median": 1e3 * med, "step_ms_all": [round(1e3 * s, 2) for s in step_s],
            "first_steps_s": [round(s, 2) for s in first], "tokens_per_s": tokens / med,
            "model_tflops_per_step": flops / 1e12, "achieved_tflops": flops / med / 1e12,
            "peak_tflops": peak / 1e12 if peak else None, "mfu": flops / med / peak if peak else None,
            "peak_memory_gib": torch.cuda.max_memory_allocated(tr.device) / 2 ** 30 if cuda else None,
            "split_ms": split}


def _split(tr, rows) -> dict:
    """One step timed in parts, each synchronised (so the parts add up to more than a free-running step)."""
    from .loop import synced_seconds

    made = {}

    def target():
        mask = tr.builder.target_mask(rows)
        made["targets"] = tr.target_fn(tr.target, rows.input_ids, rows.positions, mask, tr.draft_ids, tr.drafter.t2d)

    out = {"target_ms": 1e3 * synced_seconds(target, tr.device)}
    out["inputs_ms"] = 1e3 * synced_seconds(lambda: tr.builder.inputs(rows, made["targets"], tr.seed_step(0)),
                                            tr.device)
    out["full_step_ms"] = 1e3 * synced_seconds(lambda: tr.train_step(rows, 1e-4, tr.seed_step(0)), tr.device)
    out["drafter_and_optimizer_ms"] = out["full_step_ms"] - out["target_ms"] - out["inputs_ms"]
    return out


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``peagle-lab train-bench``."""
    common_arguments(p)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--data", default=None, help="a data folder (its training split); default: random tokens")
    p.add_argument("--tiny", action="store_true", help="the tiny random target (CPU smoke run)")
    p.add_argument("--random-target", action="store_true",
                   help="a random-weight target of the default model's shape (costs are the same; no weights needed)")
    p.add_argument("--methods", default="peagle,eagle3")
    p.add_argument("--batch-size", type=int, default=16, help="packed rows per step")
    p.add_argument("--row-len", type=int, default=2048)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--draft-vocab-size", type=int, default=8192)
    p.add_argument("--peagle-k-train", type=int, default=8)
    p.add_argument("--eagle3-k-train", type=int, default=7, help="TTT steps")
    p.add_argument("--cod-ratio", type=float, default=0.7,
                   help="P-EAGLE's COD r: depth d keeps about n·max(r^d, r_min) anchors "
                        "(1.0: every depth of every anchor)")
    p.add_argument("--cod-ratio-min", type=float, default=0.2, help="P-EAGLE's COD r_min")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--compile", default="auto", choices=COMPILE_MODES)
    p.add_argument("--max-examples", type=int, default=20000, help="examples read from --data")


@reports_errors
def run_bench(args) -> int:
    """Benchmark each method's training step; write the JSON; print a table."""
    from ..devices import resolve_device
    from ..models.checkpoints import write_json
    from ..provenance import run_info

    if args.random_target:
        target, name = random_target(resolve_device(args.device)), "random weights, SmolLM2-135M shape"
    else:
        target, _, name = load_target(args)
    if args.data:
        from .data import load_split

        examples = load_split(args.data, "train")[: args.max_examples]
    else:
        examples = _synthetic_examples(max(64, 16 * args.batch_size * args.row_len // 300), target.config.vocab_size,
                                       args.seed)
    rows = []
    for method in [m for m in args.methods.split(",") if m]:
        if method not in ("eagle3", "peagle"):
            raise ValueError(f"--methods holds {method!r}; expected eagle3 and/or peagle")
        k = args.peagle_k_train if method == "peagle" else args.eagle3_k_train
        rows.append(bench_method(target, method, examples, batch_size=args.batch_size, row_len=args.row_len,
                                 layers=args.layers, draft_vocab_size=args.draft_vocab_size, k_train=k,
                                 warmup=args.warmup, steps=args.steps, compile=args.compile, seed=args.seed,
                                 cod_ratio=args.cod_ratio, cod_ratio_min=args.cod_ratio_min))
        r = rows[-1]
        if r.get("oom"):
            print(f"{method}: out of GPU memory at {r['peak_memory_gib']:.1f} GiB ({r['error']})", flush=True)
            continue
        print(f"{method}: {r['tokens_per_s']:,.0f} target tokens/s, step {r['step_ms_median']:.1f} ms, "
              f"{r['achieved_tflops']:.1f} TFLOP/s" + (f" (MFU {100 * r['mfu']:.1f} %)" if r["mfu"] else "")
              + f", split {json.dumps({k: round(v, 1) for k, v in r['split_ms'].items()})}", flush=True)
    doc = {"benchmark": "peagle_lab training throughput (packed rows, one optimiser step)", "target": name,
           "data": args.data or "random tokens", "results": rows, **run_info(command_line(args))}
    write_json(Path(args.out), doc)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m peagle_lab.train.bench ...``."""
    p = argparse.ArgumentParser(prog="python -m peagle_lab.train.bench", description=__doc__.splitlines()[0])
    add_bench_arguments(p)
    args = p.parse_args(argv)
    return run_bench(args)


if __name__ == "__main__":
    import sys

    sys.exit(main())

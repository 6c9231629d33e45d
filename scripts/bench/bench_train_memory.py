"""Peak GPU memory of one P-EAGLE training step on one long sequence, for S segments.

Sequence partitioning (peagle_lab/train/partition.py) exists so that one long sequence
trained at K_train depths fits on a GPU: S segments run one after another, each with
its own (smaller) attention mask, and their gradients accumulate. This measures the peak
memory of one full step (forward + backward of every segment) at S = 8, 4, 2, 1 (largest
S first, so an out-of-memory at S = 1 cannot disturb the others), plus its time.

The drafter is SmolLM2-shaped (H = 576, 9 heads / 3 KV heads, a draft vocabulary of 8192)
with random weights; the target is replaced by random taps and logits of the right shapes,
because its cost is the same whatever S is and only the drafter's activations depend on S.

    python scripts/bench/bench_train_memory.py --out train_memory.json            # H200: 8192 tokens, 8 depths
    python scripts/bench/bench_train_memory.py --device cpu --seq-len 256 --out x.json   # a smoke run (no memory)
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from peagle_lab.config import DrafterConfig  # noqa: E402
from peagle_lab.drafter import Drafter  # noqa: E402
from peagle_lab.provenance import run_info  # noqa: E402
from peagle_lab.models.llama import LlamaConfig  # noqa: E402
from peagle_lab.train.cod import CODConfig, sample_elements  # noqa: E402
from peagle_lab.train.partition import partition  # noqa: E402
from peagle_lab.train.peagle import PEagleTrainConfig, peagle_step  # noqa: E402
from peagle_lab.train.targets import TargetBatch, TokenBatch  # noqa: E402


def make_batch(L: int, H: int, vd: int, vocab: int, prompt_share: float, device, g) -> TargetBatch:
    ids = torch.randint(3, vocab, (1, L), generator=g).to(device)
    loss_mask = (torch.arange(L) >= int(prompt_share * L))[None].to(device)
    taps = torch.randn(1, L, 3 * H, generator=g).mul(4).to(device, torch.bfloat16)
    logits = torch.randn(1, L, vd, generator=g).mul(3).to(device)
    argmax = torch.randint(0, vocab, (1, L), generator=g).to(device)
    return TargetBatch(TokenBatch(ids, torch.tensor([L], device=device), loss_mask), taps, logits, argmax)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--device", default="cuda")
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--k-train", type=int, default=8)
    p.add_argument("--cod-ratio", type=float, default=0.7)
    p.add_argument("--cod-ratio-min", type=float, default=0.2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--draft-vocab-size", type=int, default=8192)
    p.add_argument("--segments", default="8,4,2,1")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions after one warm-up")
    args = p.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA device; pass --device cpu for a smoke run (memory is then not measured)", file=sys.stderr)
        return 2
    target_cfg = LlamaConfig()  # SmolLM2-135M's shapes
    cfg = DrafterConfig.for_target(target_cfg, "peagle", args.layers, args.draft_vocab_size)
    g = torch.Generator().manual_seed(0)
    drafter = Drafter(cfg)
    drafter.reset_parameters(generator=g)
    drafter = drafter.to(device).train()
    drafter.attach_embeddings(torch.randn(cfg.vocab_size, cfg.hidden_size, generator=g).to(device, torch.bfloat16))
    tb = make_batch(args.seq_len, cfg.hidden_size, cfg.draft_vocab_size, cfg.vocab_size, 0.1, device, g)
    cod = CODConfig(args.k_train, args.cod_ratio, args.cod_ratio_min)
    elements = sample_elements(args.seq_len, tb.tokens.loss_mask[0].cpu(), cod, torch.Generator().manual_seed(1))
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else None

    results = []
    for S in [int(s) for s in args.segments.split(",")]:
        mcfg = PEagleTrainConfig(cod, S)
        segs = partition(elements, S)
        row = {"segments": S, "num_segments_run": len(segs), "elements": len(elements),
               "largest_segment_elements": max(len(s.index) for s in segs)}
        try:
            times, loss = [], None
            for rep in range(args.reps + 1):
                drafter.zero_grad(set_to_none=True)
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                t0 = time.perf_counter()
                res = peagle_step(drafter, tb, mcfg, torch.Generator().manual_seed(1), amp=amp)
                if cuda:
                    torch.cuda.synchronize()
                if rep:  # the first run is the warm-up
                    times.append(1000 * (time.perf_counter() - t0))
                loss = res.loss
            row.update(loss=loss, median_ms=statistics.median(times), oom=False)
            if cuda:
                row.update(peak_allocated_gib=torch.cuda.max_memory_allocated() / 2**30,
                           peak_over_start_gib=(torch.cuda.max_memory_allocated() - base) / 2**30,
                           peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30)
        except torch.cuda.OutOfMemoryError as e:
            row.update(oom=True, error=str(e).splitlines()[0])
            drafter.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        results.append(row)
        print(json.dumps(row), flush=True)

    info = run_info(" ".join(["python"] + sys.argv))
    report = {
        "benchmark": "peagle_lab train memory: one P-EAGLE step on one long sequence",
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "versions": {k: info[k] for k in ("python", "torch", "triton", "transformers")},
        "commit": info["commit"],
        "command": shlex.join([sys.executable, *sys.argv]),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {**vars(args), "hidden_size": cfg.hidden_size, "heads": cfg.num_attention_heads,
                   "kv_heads": cfg.num_key_value_heads, "elements_per_depth": elements.counts(),
                   "amp": "bf16 autocast" if cuda else "off (float32)"},
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    ok = [r for r in results if not r["oom"] and "peak_over_start_gib" in r]
    if ok:
        print("S  peak GiB (over weights+inputs)  ms/step")
        for r in ok:
            print(f"{r['segments']:<2} {r['peak_over_start_gib']:>8.2f}                        {r['median_ms']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Data-generation decoding: ``StreamDecoder`` against the engine's device loop (``SpecDecoder``), one run.

Every path decodes the same prompts to the same per-request token limits on a SmolLM2-shaped
target with random weights in bf16 (compiled layers, CUDA graphs), at the data generator's
concurrency. Random weights never emit EOS, so each request gets a token limit drawn like the real
responses the data generator writes on an H200 (about half stop at the 320-token cap, the rest
earlier; 222 tokens on average in a run at seed 1). ``--paths`` picks among:

* stream: ``StreamDecoder`` as the data generator calls it (``train.prompts.decode_all``);
* engine: ``SpecDecoder(target, None, SpecConfig(method="baseline", device_loop=True,
  refill_divisor=16))``, ``generate(prompts, limits, concurrency=c)``: the same device loop,
  reached through the engine's interface (refills at the same c // 16 free rows);
* host: the engine's host-read continuous loop (``device_loop=False``): one host read a step; it
  takes one token limit, so every request runs to the cap and is credited with its own limit's tokens;
* chunks: ``--chunks`` fixed batches of ``c`` prompts in length order, each decoded to the cap and
  credited with the tokens its requests' limits allow (what a fixed-batch generator keeps).

Each path first decodes the first ``2c`` prompts (compilation, graph capture), then the timed
passes run interleaved (``--repeats`` rounds of every path), so clocks and caches treat them
alike. ``tokens_equal`` records whether the paths' tokens match request by request. Passes stop
being started once ``--budget-s`` has passed; the JSON is rewritten after every row.

Usage: python scripts/gpu/stream_bench_gpu.py [-c 512] [--prompts 2048] [--out FILE.json]
       python scripts/gpu/stream_bench_gpu.py --device cpu --tiny     # a rehearsal on a CPU, seconds
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import sys
import time

import torch

from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.provenance import run_info
from peagle_lab.stream import StreamDecoder
from peagle_lab.testing import random_smollm2, tiny_target

PATHS = ("stream", "engine", "host", "chunks")


def workload(n: int, vocab: int, cap: int, lengths: tuple[int, int], seed: int = 0):
    """``n`` random prompts of ``lengths`` tokens, and a token limit each (half at ``cap``)."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(rng.randrange(*lengths))] for _ in range(n)]
    limits = [cap if rng.random() < 0.5 else rng.randrange(min(16, cap - 1), cap) for _ in range(n)]
    return prompts, limits


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Path:
    """One way of decoding the workload: ``warm()`` once, then ``run()`` per timed pass (a row and the tokens)."""

    def __init__(self, name: str, target, args, temperature: float) -> None:
        self.name, self.target, self.args, self.t = name, target, args, temperature
        c, cap = args.concurrency, args.cap
        if name == "stream":
            self.dec = StreamDecoder(target, concurrency=c, sync_every=args.sync_every, temperature=temperature)
        elif name in ("engine", "host"):
            cfg = SpecConfig(method="baseline", max_new_tokens=cap, temperature=temperature,
                             device_loop=name == "engine", sync_every=args.sync_every, refill_divisor=16)
            self.dec = SpecDecoder(target, None, cfg)
        else:
            self.dec = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=cap))

    def _decode(self, prompts, limits):
        """(tokens, steps, prefill_s, warm-up seconds inside the call) of one call on ``prompts``."""
        c = self.args.concurrency
        if self.name == "stream":
            res = self.dec.generate(prompts, limits, ())
            s = res.stats
            return res.tokens, s.steps, s.prefill_s, s.warmup_s + s.prefill_warmup_s
        warm = self._warmup_s()
        lim = limits if self.name == "engine" else max(limits)  # the host loop takes one limit
        res = self.dec.generate(prompts, lim, (), concurrency=c)
        toks = res.tokens if self.name == "engine" else [t[:m] for t, m in zip(res.tokens, limits)]
        return toks, res.metrics.num_steps, res.metrics.prefill_s, self._warmup_s() - warm

    def _warmup_s(self) -> float:
        """Compilation and capture seconds so far (the engine's device loop keeps its own count)."""
        if self.name == "engine":
            return 0.0 if self.dec.plain is None else self.dec.plain.warmup_s
        return self.dec.warmup_s

    def warm(self, prompts, limits) -> None:
        n = 2 * self.args.concurrency
        if self.name == "chunks":
            self.dec.generate(prompts[: self.args.concurrency], eos_token_ids=())
        else:
            self._decode(prompts[:n], limits[:n])
        _sync(self.target.device)

    def run(self, prompts, limits) -> tuple[dict, list | None]:
        if self.name == "chunks":
            return self._chunks(prompts, limits), None
        dev, c = self.target.device, self.args.concurrency
        _sync(dev)
        t0 = time.perf_counter()
        toks, steps, prefill_s, warm_s = self._decode(prompts, limits)
        _sync(dev)
        wall = time.perf_counter() - t0
        assert all(len(t) == m for t, m in zip(toks, limits)), f"{self.name}: a request stopped short of its limit"
        n = sum(map(len, toks))
        row = {"path": self.name, "c": c, "temperature": self.t, "requests": len(toks), "tokens": n, "wall_s": wall,
               "tokens_per_s": n / wall, "steps": steps, "step_ms": 1e3 * (wall - prefill_s) / max(steps, 1),
               "prefill_s": prefill_s, "warmup_s": warm_s, "row_use": (n - len(toks)) / max(steps * c, 1)}
        if self.name != "host":
            row["sync_every"] = self.args.sync_every
        return row, toks

    def _chunks(self, prompts, limits) -> dict:
        c, cap = self.args.concurrency, self.args.cap
        order = sorted(range(len(prompts)), key=lambda q: len(prompts[q]))
        _sync(self.target.device)
        t0, steps, credited = time.perf_counter(), 0, 0
        for i in range(self.args.chunks):
            part = order[i * c:(i + 1) * c]
            steps += self.dec.generate([prompts[q] for q in part], max_new_tokens=cap, eos_token_ids=()).metrics.num_steps
            credited += sum(limits[q] for q in part)
        _sync(self.target.device)
        wall = time.perf_counter() - t0
        return {"path": "chunks", "c": c, "temperature": 0.0, "requests": self.args.chunks * c, "tokens": credited,
                "wall_s": wall, "tokens_per_s": credited / wall, "step_ms": 1e3 * wall / max(steps, 1),
                "row_use": credited / max(steps * c, 1)}


def summary(rows: list[dict], tokens: dict) -> dict:
    """Per (path, temperature): the timed passes' median and best tokens/s; engine ÷ stream; token equality."""
    out = {}
    for key in sorted({(r["path"], r["temperature"]) for r in rows}):
        tps = [r["tokens_per_s"] for r in rows if (r["path"], r["temperature"]) == key]
        out[f"{key[0]}@T={key[1]}"] = {"median_tokens_per_s": statistics.median(tps), "best_tokens_per_s": max(tps),
                                       "passes": len(tps)}
    for t in sorted({r["temperature"] for r in rows}):
        a, b = out.get(f"engine@T={t}"), out.get(f"stream@T={t}")
        if a and b:
            out[f"engine_over_stream@T={t}"] = a["median_tokens_per_s"] / b["median_tokens_per_s"]
        got = {p: tokens[(p, t)] for p in ("stream", "engine", "host") if (p, t) in tokens}
        if len(got) > 1:
            first = next(iter(got.values()))
            out[f"tokens_equal@T={t}"] = {p: toks == first for p, toks in got.items()}
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--concurrency", type=int, default=None, help="rows (default 512; 16 with --tiny)")
    ap.add_argument("--prompts", type=int, default=None, help="prompts (default 2048; 96 with --tiny)")
    ap.add_argument("--cap", type=int, default=None, help="the response cap (default 320; 24 with --tiny)")
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=["stream", "engine"])
    ap.add_argument("--repeats", type=int, default=2, help="timed passes of every path, interleaved")
    ap.add_argument("--chunks", type=int, default=2, help="chunks timed on the chunks path")
    ap.add_argument("--sync-every", type=int, default=4)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--tiny", action="store_true", help="the 4-layer test target in float32: a rehearsal")
    ap.add_argument("--budget-s", type=float, default=95.0, help="start no pass after this many seconds")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    tiny = args.tiny
    args.concurrency = args.concurrency or (16 if tiny else 512)
    args.prompts = args.prompts or (96 if tiny else 2048)
    args.cap = args.cap or (24 if tiny else 320)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("stream_bench_gpu.py: no CUDA device (a rehearsal: --device cpu --tiny)")
    if args.prompts <= args.concurrency:
        raise SystemExit(f"--prompts {args.prompts} must exceed -c {args.concurrency} (continuous batching)")
    return args


def main(argv: list[str] | None = None) -> int:
    t_start = time.perf_counter()
    args = parse(argv)
    if args.tiny:
        target, lengths = tiny_target().to(args.device), (4, 40)
    else:
        target, lengths = random_smollm2(device=args.device), (60, 250)
    prompts, limits = workload(args.prompts, target.config.vocab_size, args.cap, lengths)
    command = shlex.join(["python", "scripts/gpu/stream_bench_gpu.py", *(sys.argv[1:] if argv is None else argv)])
    doc = {**run_info(command),
           "what": "data-generation decoding: StreamDecoder vs the engine's device loop (SpecDecoder, device_loop=True)"
                   f" on the same prompts and limits; {'tiny float32 target' if args.tiny else 'bf16, SmolLM2 shape'},"
                   " random weights",
           "settings": {k: v for k, v in vars(args).items() if k != "out"}, "rows": [], "summary": {}}
    tokens = {}
    for t in args.temperatures:
        paths = [Path(p, target, args, t) for p in args.paths if t == 0 or p != "chunks"]
        for p in paths:
            p.warm(prompts, limits)
        for rep in range(args.repeats):
            for p in paths:
                if time.perf_counter() - t_start > args.budget_s:
                    print(f"budget of {args.budget_s} s spent: {p.name} pass {rep} not started", flush=True)
                    continue
                row, toks = p.run(prompts, limits)
                row["repeat"] = rep
                if toks is not None:
                    tokens[(p.name, t)] = toks
                doc["rows"].append(row)
                doc["summary"] = summary(doc["rows"], tokens)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
                if args.out:
                    json.dump(doc, open(args.out, "w"), indent=2)
        del paths
    doc["wall_s"] = time.perf_counter() - t_start
    print(json.dumps(doc["summary"]), f"total {doc['wall_s']:.1f} s", flush=True)
    if args.out:
        json.dump(doc, open(args.out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

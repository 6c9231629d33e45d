"""Load and soak: many requests through ``SpecDecoder`` in waves, memory read after every wave.

What the soak shows (issue 8): the engine keeps serving at a steady rate and its memory
stops growing once its KV caches exist. One engine per method is built once and reused
for every batch, so its caches (sized up front for the longest prompt) and, on CUDA, its
captured graphs are allocated by the warm-up and then only reused:

```
before ─► engines + caches + warm-up ─► after warm-up ─► wave 1 ─► wave 2 ─► … ─► wave W
 mem₀                                     mem_w            mem₁      mem₂          mem_W
verdict: memory stable  ⇔  max(mem₁ … mem_W) − mem_w ≤ tolerance, and every cache tensor
         kept its address and size across the waves
```

Memory is ``torch.cuda.memory_allocated`` on CUDA (with the wave's peak from
``max_memory_allocated``) and the process RSS from ``/proc/self/statm`` on CPU, read after
``gc.collect()`` so that only live objects count. Request ``i`` decodes prompt
``i mod len(prompts)``; a wave's batches are exactly ``concurrency`` requests, and batch
``j`` (counted over the whole run) uses ``methods[j mod len(methods)]``, so every wave mixes
the methods while two runs with other methods decode identical batches (the lossless check
in ``tests/test_soak.py`` compares them).
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field

import torch

from ..acceptance import acceptance_length
from ..config import BACKENDS, MAX_K, METHODS, SpecConfig, check_choice, check_int
from ..engine import SpecDecoder
from ..devices import DTYPES, resolve_device, resolve_dtype

MiB = 1 << 20


@dataclass(frozen=True)
class SoakConfig:
    """What one soak run decodes. The defaults are the H200 run of issue 8."""

    requests: int = 1024  # total requests over all waves
    concurrency: int = 64  # requests per generate call (one batch)
    wave_size: int = 256  # requests per wave; a multiple of concurrency
    methods: tuple[str, ...] = METHODS  # batch j runs methods[j % len(methods)]
    num_speculative_tokens: int = 3  # K for eagle3 / peagle
    max_new_tokens: int = 128  # per request
    temperature: float = 0.0
    ignore_eos: bool = True  # fixed output length, so waves compare
    seed: int = 0
    cuda_graphs: bool = True
    kernel_backend: str = "auto"
    tolerance_mib: float | None = None  # growth allowed after warm-up; None: 16 on CUDA, 64 (RSS) on CPU

    def __post_init__(self) -> None:
        check_int("requests", self.requests, 1)
        check_int("concurrency", self.concurrency, 1, 4096)
        check_int("wave_size", self.wave_size, 1)
        if self.wave_size % self.concurrency:
            raise ValueError(f"wave_size={self.wave_size} must be a multiple of concurrency={self.concurrency} "
                             "(every batch has one shape, so no wave captures new CUDA graphs)")
        if self.requests % self.wave_size:
            raise ValueError(f"requests={self.requests} must be a multiple of wave_size={self.wave_size}")
        if not self.methods:
            raise ValueError("methods is empty; give at least one of " + ", ".join(METHODS))
        for m in self.methods:
            check_choice("method", m, METHODS)
        check_int("num_speculative_tokens", self.num_speculative_tokens, 1, MAX_K)
        check_int("max_new_tokens", self.max_new_tokens, 1, 1 << 16)
        check_choice("kernel_backend", self.kernel_backend, BACKENDS)
        if self.tolerance_mib is not None and not self.tolerance_mib >= 0:
            raise ValueError(f"tolerance_mib={self.tolerance_mib!r} must be >= 0 (or None for the default)")
        SpecConfig(temperature=self.temperature, seed=self.seed)  # the engine's own checks

    @property
    def num_waves(self) -> int:
        return self.requests // self.wave_size


@dataclass
class SoakResult:
    run_info: dict
    config: dict
    memory: dict  # "kind", "before", "after_warmup", "kv_cache_bytes"
    waves: list[dict]
    summary: dict
    tokens: list[list[int]] = field(default_factory=list, repr=False)  # per request; not written to JSON

    def as_dict(self) -> dict:
        return {"run_info": self.run_info, "config": self.config, "memory": self.memory,
                "waves": self.waves, "summary": self.summary}


def memory_bytes(device: torch.device) -> dict:
    """Live memory now: CUDA allocated bytes (and the peak since the last reset), or CPU RSS."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return {"allocated": torch.cuda.memory_allocated(device),
                "peak_allocated": torch.cuda.max_memory_allocated(device),
                "reserved": torch.cuda.memory_reserved(device)}
    return {"rss": rss_bytes()}


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc/self/statm``; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cache_fingerprint(engines: dict[str, SpecDecoder]) -> list[tuple[str, int, int, int]]:
    """(method, allocations so far, data_ptr, bytes) of every cache tensor: equal fingerprints mean reused caches.

    The allocation count is what proves reuse: a cache freed and allocated again can get the
    same address back from the allocator, so equal pointers alone could hide a reallocation.
    """
    return [(m, e.cache_allocations, t.data_ptr(), t.numel() * t.element_size())
            for m, e in engines.items() for t in e.cache_tensors()]


def _key(device: torch.device) -> str:
    return "allocated" if device.type == "cuda" else "rss"


def _engines(target, drafters: dict, methods: tuple[str, ...], cfg: SoakConfig, need: int) -> dict:
    """One engine per method, its caches reserved for the longest prompt (no wave regrows one)."""
    engines = {}
    for m in methods:
        spec = SpecConfig(method=m, num_speculative_tokens=cfg.num_speculative_tokens, temperature=cfg.temperature,
                          max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, cuda_graphs=cfg.cuda_graphs,
                          kernel_backend=cfg.kernel_backend)
        engines[m] = SpecDecoder(target, drafters.get(m), spec)
        engines[m].reserve(cfg.concurrency, need)
    return engines


def _wave(engines: dict, prompts: list[list[int]], cfg: SoakConfig, w: int, tokens: list, advance) -> dict:
    """Decode wave ``w`` (batches of c, the methods taking turns); its tokens/s and AL per method.

    The new tokens of every request are appended to ``tokens``; ``advance(c)`` after each batch.
    """
    dev, c = next(iter(engines.values())).device, cfg.concurrency
    eos = () if cfg.ignore_eos else None
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    per_method = {m: {"requests": 0, "output_tokens": 0, "drafts": 0, "accepted": 0} for m in engines}
    t0 = time.perf_counter()
    first = w * cfg.wave_size
    for batch, start in enumerate(range(first, first + cfg.wave_size, c), start=first // c):
        m = cfg.methods[batch % len(cfg.methods)]
        res = engines[m].generate([prompts[i % len(prompts)] for i in range(start, start + c)],
                                  max_new_tokens=cfg.max_new_tokens, eos_token_ids=eos)
        tokens.extend(res.tokens)
        s = per_method[m]
        s["requests"] += c
        s["output_tokens"] += res.metrics.output_tokens
        s["drafts"] += res.metrics.num_drafts
        s["accepted"] += res.metrics.num_accepted_tokens
        advance(c)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    wall = time.perf_counter() - t0
    out = sum(s["output_tokens"] for s in per_method.values())
    return {"wave": w + 1, "requests": cfg.wave_size, "output_tokens": out, "wall_s": wall,
            "tps": out / wall if wall > 0 else 0.0,
            "by_method": {m: {"requests": s["requests"], "output_tokens": s["output_tokens"],
                              "acceptance_length": acceptance_length(s["accepted"], s["drafts"])}
                          for m, s in per_method.items() if s["requests"]}}


def run_soak(target, drafters: dict, prompts: list[list[int]], cfg: SoakConfig, *, run_info: dict,
             extra_config: dict | None = None, progress: bool = True, log=print) -> SoakResult:
    """Decode ``cfg.requests`` requests in waves and read memory before, after warm-up and per wave.

    Args:
        target: the target ``LlamaModel``.
        drafters: ``{"eagle3": Drafter, "peagle": Drafter}`` for the speculative methods run.
        prompts: token-id prompts; request ``i`` decodes ``prompts[i % len(prompts)]``.
        run_info: ``peagle_lab.provenance.run_info(...)`` of this run.
        extra_config: more to record beside ``cfg`` (model, heads, dtype).

    Returns:
        SoakResult with per-wave tokens/s, acceptance and memory, the summary and verdict,
        and the new tokens of every request (``tokens``, not part of ``as_dict``).

    Raises:
        ValueError: a method without its drafter, no prompts, or a prompt that does not fit.
    """
    from tqdm.auto import tqdm

    missing = [m for m in cfg.methods if m != "baseline" and m not in drafters]
    if missing:
        raise ValueError(f"no drafter given for {', '.join(missing)}")
    if not prompts:
        raise ValueError("prompts is empty; the soak needs at least one prompt")
    dev, c = target.device, cfg.concurrency
    methods = tuple(dict.fromkeys(cfg.methods))
    eos = () if cfg.ignore_eos else None
    k = cfg.num_speculative_tokens
    need = max(map(len, prompts)) + cfg.max_new_tokens + k + 1

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    before = memory_bytes(dev)
    engines = _engines(target, drafters, methods, cfg, need)
    warm = [prompts[i % len(prompts)] for i in range(c)]
    for e in engines.values():
        e.generate(warm, max_new_tokens=min(2 * k + 4, cfg.max_new_tokens), eos_token_ids=eos)
    after_warmup = memory_bytes(dev)
    fingerprint = cache_fingerprint(engines)
    kv_bytes = sum(f[-1] for f in fingerprint)
    key = _key(dev)
    log(f"soak: {cfg.requests} requests in {cfg.num_waves} waves of {cfg.wave_size} (c={c}, "
        f"{'/'.join(methods)}, K={k}, {cfg.max_new_tokens} new tokens) on {dev}; {key} before "
        f"{before[key] / MiB:.1f} MiB, after warm-up {after_warmup[key] / MiB:.1f} MiB "
        f"(KV caches {kv_bytes / MiB:.1f} MiB)")

    tty = progress and sys.stderr.isatty()
    bar = tqdm(total=cfg.requests, desc="soak", unit="req", disable=not tty)
    tokens: list[list[int]] = []
    waves = []
    for w in range(cfg.num_waves):
        wave = _wave(engines, prompts, cfg, w, tokens, bar.update)
        mem = wave["memory"] = memory_bytes(dev)
        wave["growth_since_warmup_bytes"] = mem[key] - after_warmup[key]
        wave["caches_reused"] = cache_fingerprint(engines) == fingerprint
        waves.append(wave)
        note = (f"wave {w + 1}/{cfg.num_waves}: {wave['tps']:.0f} tok/s, {key} {mem[key] / MiB:.1f} MiB "
                f"({wave['growth_since_warmup_bytes'] / MiB:+.1f} since warm-up)")
        bar.set_postfix_str(note.split(": ", 1)[1])
        if not tty:  # logs of remote runs get one line per wave instead of the bar
            log(note)
    bar.close()

    summary = summarise(waves, before, after_warmup, kv_bytes, key, cfg, dev)
    log(f"soak: {summary['verdict']}")
    config = {**asdict(cfg), **(extra_config or {}), "num_prompts": len(prompts),
              "prompt_tokens": {"min": min(map(len, prompts)), "max": max(map(len, prompts))}}
    memory = {"kind": "cuda memory_allocated" if key == "allocated" else "process RSS", "unit": "bytes",
              "before": before, "after_warmup": after_warmup, "kv_cache_bytes": kv_bytes}
    return SoakResult(run_info, config, memory, waves, summary, tokens)


def summarise(waves: list[dict], before: dict, after_warmup: dict, kv_bytes: int, key: str,
              cfg: SoakConfig, device: torch.device) -> dict:
    """Totals, the tokens/s trend and the memory verdict of a finished soak."""
    tol_mib = cfg.tolerance_mib if cfg.tolerance_mib is not None else (16.0 if device.type == "cuda" else 64.0)
    growth = max(w["growth_since_warmup_bytes"] for w in waves)
    reused = all(w["caches_reused"] for w in waves)
    stable = growth <= tol_mib * MiB and reused
    setup = after_warmup[key] - before[key]
    tps = [w["tps"] for w in waves]
    verdict = (f"memory {'stable' if stable else 'GREW'}: engines, KV caches ({kv_bytes / MiB:.1f} MiB) and warm-up "
               f"took {setup / MiB:.1f} MiB of {key}; over {len(waves)} waves it then grew by at most "
               f"{growth / MiB:.1f} MiB (tolerance {tol_mib:g} MiB); caches "
               f"{'reused' if reused else 'REALLOCATED'}; tokens/s median {statistics.median(tps):.0f} "
               f"(first wave {tps[0]:.0f}, last {tps[-1]:.0f})")
    return {"requests": sum(w["requests"] for w in waves), "output_tokens": sum(w["output_tokens"] for w in waves),
            "wall_s": sum(w["wall_s"] for w in waves), "tps_median": statistics.median(tps),
            "tps_first": tps[0], "tps_last": tps[-1], "setup_bytes": setup, "kv_cache_bytes": kv_bytes,
            "max_growth_after_warmup_bytes": growth, "tolerance_bytes": int(tol_mib * MiB),
            "caches_reused": reused, "memory_stable": stable, "verdict": verdict}


# ---------------------------------------------------------------- command line (scripts/bench/soak.py)

def add_soak_arguments(p) -> None:
    """The soak flags (``scripts/bench/soak.py``); defaults are the H200 run."""
    d = SoakConfig()
    p.add_argument("--requests", type=int, default=d.requests, help=f"total requests (default {d.requests})")
    p.add_argument("--concurrency", "-c", type=int, default=d.concurrency, help=f"requests per batch (default {d.concurrency})")
    p.add_argument("--wave-size", type=int, help="requests per wave (default: requests/4, a multiple of concurrency)")
    p.add_argument("--method", dest="methods", nargs="+", choices=METHODS,
                   help="methods, alternating batch by batch (default: all three)")
    p.add_argument("-k", "--num-speculative-tokens", type=int, default=d.num_speculative_tokens)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--stop-at-eos", action="store_true", help="stop requests at EOS (default: fixed length)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workload", choices=("chat", "code"), default="chat", help="prompts (peagle_lab.bench.workloads)")
    p.add_argument("--tolerance-mib", type=float, help="memory growth allowed after warm-up (default 16 CUDA, 64 CPU)")
    p.add_argument("--no-cuda-graphs", action="store_true")
    p.add_argument("--kernel-backend", choices=BACKENDS, default="auto")
    p.add_argument("--tiny", action="store_true", help="a random tiny model and heads (seconds; tests)")
    p.add_argument("--model", help="a HF folder or .gguf (default: the embedded SmolLM2)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                   help="auto: bfloat16 on CUDA, else float32")
    p.add_argument("--out", default="soak.json", help="the JSON file to write (default ./soak.json)")
    p.add_argument("--no-progress", action="store_true")


def soak_config(args) -> SoakConfig:
    wave = args.wave_size
    if wave is None:  # four waves when the numbers allow it, else one batch per wave
        c = args.concurrency
        wave = args.requests // 4 if isinstance(c, int) and c > 0 and args.requests % (4 * c) == 0 else c
    return SoakConfig(requests=args.requests, concurrency=args.concurrency, wave_size=wave,
                      methods=tuple(args.methods or METHODS), num_speculative_tokens=args.num_speculative_tokens,
                      max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                      ignore_eos=not args.stop_at_eos, seed=args.seed, cuda_graphs=not args.no_cuda_graphs,
                      kernel_backend=args.kernel_backend, tolerance_mib=args.tolerance_mib)


def _models(args, cfg: SoakConfig, device, dtype):
    """(target, tokenizer, drafters, notes) for the run."""
    spec = [m for m in dict.fromkeys(cfg.methods) if m != "baseline"]
    if args.tiny:
        from ..testing import tiny_drafter, tiny_target
        from .workloads import HashTokenizer

        target = tiny_target().to(device=device, dtype=dtype)
        drafters = {m: tiny_drafter(target, m, seed=i + 1) for i, m in enumerate(spec)}
        return (target, HashTokenizer(target.config.vocab_size), drafters,
                {"model": "tiny random (peagle_lab.testing.tiny_target)", "heads": {m: "random (tiny)" for m in spec}})
    from .. import zoo
    from ..heads import default_drafter

    target, tokenizer = zoo.load_model(args.model, dtype, device, quiet=True)
    drafters, heads = {}, {}
    for m in spec:
        drafters[m], heads[m] = default_drafter(target, m)
    return target, tokenizer, drafters, {"model": args.model or "SmolLM2-135M-Instruct (embedded default)",
                                         "heads": heads}


def run_soak_cli(args) -> SoakResult:
    """Run the soak for parsed ``args`` and write its JSON (with run_info) to ``args.out``."""
    from ..models.checkpoints import write_json
    from ..provenance import run_info
    from .workloads import load_workload

    cfg = soak_config(args)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    info = run_info(getattr(args, "command_line", None))
    target, tokenizer, drafters, notes = _models(args, cfg, device, dtype)
    limit = target.config.max_position_embeddings - cfg.max_new_tokens - cfg.num_speculative_tokens - 1
    n = min(cfg.requests, 80 if args.workload == "chat" else 164)
    prompts = [list(p.token_ids) for p in load_workload(args.workload, n, cfg.seed, tokenizer, max_prompt_tokens=limit)]
    notes.update(device=str(device), dtype=str(dtype).removeprefix("torch."), workload=args.workload)
    result = run_soak(target, drafters, prompts, cfg, run_info=info, extra_config=notes,
                      progress=not args.no_progress)
    write_json(args.out, result.as_dict())
    print(f"soak: wrote {args.out}")
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shlex

    p = argparse.ArgumentParser(prog="scripts/bench/soak.py", description=__doc__.split("\n")[0])
    add_soak_arguments(p)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.command_line = shlex.join(["python", "scripts/bench/soak.py", *argv])
    try:
        result = run_soak_cli(args)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"soak: error: {e}", file=sys.stderr)
        return 2
    return 0 if result.summary["memory_stable"] else 1

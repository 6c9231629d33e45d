"""Where does a continuous-batching admission spend its time? One profiled ``generate(..., concurrency=c)``.

On the H200 (325ad7e, ``docs/results/h200/continuous_batching/``) a cell's 16-32 admissions cost
0.7-2.2 ms a request against 0.28-0.72 ms in one static prefill of 64 prompts, so refilled rows lost
more than they won. An admission (``SpecDecoder._admit``) is a padded prefill in a scratch cache, the
first draft, the copy of the new rows' KV blocks into the main caches and the state update, with one
host sync after it. This script runs one continuously batched call to warm every graph, then profiles
a second one with ``torch.profiler``, each part of an admission and each decode step labelled, and
writes per label: calls, wall (host) ms, device ms and the ops that took the most device time (host time on a CPU). Where
device time is far below wall time, the host is what an admission waits for.

    python scripts/gpu/admission_profile_gpu.py --out admission_profile.json            # H200, ~1 min
    python scripts/gpu/admission_profile_gpu.py --tiny --device cpu --out /tmp/a.json   # a smoke run
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from peagle_lab.engine import batching, loop as engine_mod  # noqa: E402  (the functions an admission calls)
from peagle_lab.bench.workloads import HashTokenizer, load_workload  # noqa: E402
from peagle_lab.config import SpecConfig  # noqa: E402
from peagle_lab.models.checkpoints import write_json  # noqa: E402
from peagle_lab.provenance import run_info  # noqa: E402

LABELS = ("admit", "admit.prefill", "admit.draft", "admit.copy_kv", "admit.state", "decode_step")


HOST_S: dict[str, float] = {}  # label -> seconds of host (Python) wall time inside it, from perf_counter


@contextlib.contextmanager
def _span(name: str):
    """A profiler label that also adds its host wall time to ``HOST_S``: the profiler's own host totals
    read 0.0 for every label and op in the first H200 run (torch 2.11 with CUDA activity), so they are
    not relied on."""
    t0 = time.perf_counter()
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        HOST_S[name] = HOST_S.get(name, 0.0) + time.perf_counter() - t0


def _labelled(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        with _span(name):
            return fn(*a, **kw)
    return wrapper


def instrument(dec: engine_mod.SpecDecoder) -> contextlib.ExitStack:
    """Label an admission's parts and the decode step for the profiler (undone when the stack closes)."""
    stack = contextlib.ExitStack()

    def patch(obj, attr, name):
        old = getattr(obj, attr)
        setattr(obj, attr, _labelled(name, old))
        stack.callback(setattr, obj, attr, old)

    admitting = {"on": False}
    admit, prefill, draft = dec._admit, dec._prefill, dec._draft

    def admit_wrapper(*a, **kw):
        admitting["on"] = True
        try:
            with _span("admit"):
                return admit(*a, **kw)
        finally:
            admitting["on"] = False

    def part(fn, name):  # a part of an admission, unlabelled when the decode loop calls it
        def wrapper(*a, **kw):
            if not admitting["on"]:
                return fn(*a, **kw)
            with _span(name):
                return fn(*a, **kw)
        return wrapper

    dec._admit, dec._prefill, dec._draft = admit_wrapper, part(prefill, "admit.prefill"), part(draft, "admit.draft")
    stack.callback(lambda: [delattr(dec, n) for n in ("_admit", "_prefill", "_draft")])
    patch(batching, "copy_kv_blocks", "admit.copy_kv")  # one copy each for the target's and the drafter's cache
    patch(engine_mod, "admitted", "admit.state")  # called after each admission, by the loop
    step = dec._step
    dec._step = _labelled("decode_step", step)
    stack.callback(lambda: delattr(dec, "_step"))
    return stack


def summarise(prof, top: int) -> dict:
    """Per label: calls, host ms, device ms; and the ops with the most device time overall."""
    events = {e.key: e for e in prof.key_averages()}

    def device_us(e) -> float:
        return float(getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0) or 0.0)

    labels = {name: {"calls": int(events[name].count), "host_ms": 1e3 * HOST_S.get(name, 0.0),
                     "device_ms": device_us(events[name]) / 1e3}
              for name in LABELS if name in events}
    on_device = any(device_us(e) for e in events.values())
    rank = device_us if on_device else (lambda e: e.cpu_time_total)  # a CPU run has no device time: host time
    ops = sorted((e for e in events.values() if e.key not in LABELS), key=rank, reverse=True)[:top]
    return {"labels": labels, "top_device_ops": [{"op": e.key, "calls": int(e.count), "device_ms": device_us(e) / 1e3,
                                                  "host_ms": e.cpu_time_total / 1e3} for e in ops]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="JSON file to write (default: print the summary only)")
    p.add_argument("--method", default="peagle", choices=["baseline", "eagle3", "peagle"])
    p.add_argument("-k", type=int, default=4)
    p.add_argument("-c", "--concurrency", type=int, default=64)
    p.add_argument("--requests", type=int, default=256, help="requests in the call (prompts taken in turn)")
    p.add_argument("--refill-divisor", type=int, default=8)
    p.add_argument("--workload", default="code", choices=["chat", "code"])
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny random target and heads (a smoke run)")
    p.add_argument("--top", type=int, default=15, help="ops listed by device time")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("admission_profile_gpu.py: needs CUDA", file=sys.stderr)  # or --device cpu, for a smoke run
        return 2
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.tiny:
        from peagle_lab.testing import tiny_drafter, tiny_target
        target = tiny_target().to(device=device, dtype=dtype)
        tokenizer = HashTokenizer(target.config.vocab_size)
        drafter = None if args.method == "baseline" else tiny_drafter(target, args.method)
    else:
        from peagle_lab import zoo
        from peagle_lab.heads import default_drafter
        target, tokenizer = zoo.load_model(None, dtype, device, quiet=True)
        drafter = None if args.method == "baseline" else default_drafter(target, args.method)[0]
    prompts = load_workload(args.workload, 80 if args.workload == "chat" else 164, tokenizer=tokenizer)
    ids = [list(prompts[i % len(prompts)].token_ids) for i in range(args.requests)]
    dec = engine_mod.SpecDecoder(target, drafter, SpecConfig(
        method=args.method, num_speculative_tokens=args.k, max_new_tokens=args.max_new_tokens,
        refill_divisor=args.refill_divisor))
    dec.reserve(args.concurrency + 1, max(map(len, ids)) + args.max_new_tokens + args.k + 1)
    call = functools.partial(dec.generate, ids, eos_token_ids=(), concurrency=args.concurrency)
    call()  # warm: compile, capture every graph of the call's shapes
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    HOST_S.clear()  # the labels' host time counts the profiled call only
    with instrument(dec), torch.profiler.profile(activities=activities) as prof:
        t0 = time.perf_counter()
        res = call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    m = res.metrics
    out = {**run_info(), "what": "one profiled continuously batched generate: where an admission's time goes",
           "config": {k: v for k, v in vars(args).items() if k != "out"},
           "call": {"wall_ms": 1e3 * wall, "engine_prefill_ms": 1e3 * m.prefill_s, "engine_decode_ms": 1e3 * m.decode_s,
                    "steps": m.num_steps, "output_tokens": m.output_tokens},
           **summarise(prof, args.top)}
    if args.out:
        write_json(Path(args.out), out)
    for name, v in out["labels"].items():
        print(f"{name:<14} {v['calls']:>5} calls  host {v['host_ms']:8.1f} ms  device {v['device_ms']:8.1f} ms")
    print(f"call: {out['call']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time the fused kernels of the decode step against their PyTorch references on one CUDA GPU.

What is timed, per (c, K, dtype), with H = 576 (SmolLM2) and a decode step (T = K + 1):
    fused:     prepare_draft_inputs + fill_draft_hidden, backend="triton" (two launches)
    reference: the same two calls with backend="torch" (the PyTorch specs)
and, under ``verify`` in the JSON, greedy verification of float32 logits [c, K+1, 49152]
(verify_greedy, Triton vs reference) for c up to 256.
Both are checked equal first. Each path gets two medians: eager (``triton.testing.do_bench``;
at these sizes host-side launch cost dominates it, as in a notebook) and graph replay
(``triton.testing.do_bench_cudagraph``, as the engine's CUDA-graph decode loop sees it).
Kernel launches are counted from one profiled call (CUDA kernel events of torch.profiler).

Usage (from the repository root, with peagle_lab importable, e.g. ``pip install -e .``):
    PYTHONPATH=. python scripts/bench/bench_kernels.py [--out FILE]   # default: a new run folder,
        docs/results/<device>/kernels/<date>-<commit>/kernels.json (peagle_lab.bench.archive)
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

import torch

from peagle_lab.bench.archive import RESULTS, folder_name
from peagle_lab.provenance import run_info

REPO = Path(__file__).resolve().parents[2]
H = 576  # SmolLM2-135M hidden size
CONCURRENCY = (1, 8, 64)
NUM_SPECULATIVE_TOKENS = (3, 7)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _inputs(c: int, K: int, dtype: torch.dtype, seed: int = 0) -> dict:
    """A decode step's verify outputs: random tokens, ragged acceptance, taps after fc."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    T = K + 1
    start = torch.randint(0, 1000, (c, 1), device="cuda", generator=g)
    return dict(
        token_ids=torch.randint(0, 49152, (c, T), device="cuda", generator=g),
        positions=start + torch.arange(T, device="cuda"),
        num_accepted=torch.randint(0, T, (c,), device="cuda", generator=g),
        bonus_tokens=torch.randint(0, 49152, (c,), device="cuda", generator=g),
        hidden=torch.randn(c * T, H, device="cuda", generator=g).to(dtype),
        shared_hidden=torch.randn(H, device="cuda", generator=g).to(dtype),
        K=K,
    )


def _draft_batch(x: dict, backend: str):
    from peagle_lab.kernels.fill_draft_hidden import fill_draft_hidden
    from peagle_lab.kernels.prepare_draft_inputs import prepare_draft_inputs

    d = prepare_draft_inputs(x["token_ids"], x["positions"], x["num_accepted"], x["bonus_tokens"],
                             num_speculative_tokens=x["K"], mask_token_id=49151, max_len=4096,
                             backend=backend)
    return d, fill_draft_hidden(x["hidden"], d.hidden_mapping, d.is_masked, x["shared_hidden"],
                                backend=backend)


def _check_equal(x: dict) -> None:
    (fd, fh), (rd, rh) = _draft_batch(x, "triton"), _draft_batch(x, "torch")
    for f in ("input_ids", "positions", "slot_mapping", "is_masked", "hidden_mapping", "sample_indices"):
        if not torch.equal(getattr(fd, f), getattr(rd, f)):
            raise AssertionError(f"fused and reference {f} differ")
    if not torch.equal(fh.view(torch.uint8), rh.view(torch.uint8)):
        raise AssertionError("fused and reference hidden rows differ")


def _kernel_launches(fn) -> tuple[int, list[str]]:
    """CUDA kernels one call of ``fn`` launches (memcpy/memset excluded), and their names."""
    from torch.profiler import ProfilerActivity, profile

    fn()  # compile and warm the caching allocator outside the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA
             and not e.name.startswith(("Memcpy", "Memset"))]
    return len(names), names


def _row(c: int, K: int, dtype_name: str) -> dict:
    from triton.testing import do_bench, do_bench_cudagraph

    x = _inputs(c, K, DTYPES[dtype_name])
    _check_equal(x)
    row = dict(c=c, K=K, T=K + 1, H=H, dtype=dtype_name, draft_rows=c * (2 * K))
    for path, backend in (("fused", "triton"), ("reference", "torch")):
        def fn(backend=backend):
            return _draft_batch(x, backend)

        row[f"{path}_launches"], row[f"{path}_kernels"] = _kernel_launches(fn)
        row[f"{path}_eager_us"] = 1e3 * do_bench(fn, warmup=25, rep=200, return_mode="median")
        row[f"{path}_graph_us"] = 1e3 * do_bench_cudagraph(fn, rep=50, return_mode="median")
    row["speedup_eager"] = row["reference_eager_us"] / row["fused_eager_us"]
    row["speedup_graph"] = row["reference_graph_us"] / row["fused_graph_us"]
    return row


VERIFY_CONCURRENCY = (1, 8, 64, 256)


def _verify_row(c: int, K: int, V: int = 49152) -> dict:
    """Greedy verification at (c, K): fused vs reference, graph-replay medians (µs)."""
    from triton.testing import do_bench_cudagraph

    from peagle_lab.kernels.verify import verify_greedy

    g = torch.Generator(device="cuda").manual_seed(c * 100 + K)
    logits = torch.randn(c, K + 1, V, device="cuda", generator=g)
    drafts = logits[:, :K].argmax(-1)  # accepted up to a random slot: ragged, realistic
    cut = torch.randint(0, K + 1, (c,), device="cuda", generator=g)
    drafts = torch.where(torch.arange(K, device="cuda") < cut[:, None], drafts, (drafts + 1) % V)
    fused, ref = verify_greedy(logits, drafts, backend="triton"), verify_greedy(logits, drafts, backend="torch")
    if not torch.equal(fused.output_tokens, ref.output_tokens):
        raise AssertionError(f"verify_greedy: fused and reference differ at c={c}, K={K}")
    row = dict(c=c, K=K, V=V, dtype="fp32")
    for path, backend in (("fused", "triton"), ("reference", "torch")):
        row[f"{path}_graph_us"] = 1e3 * do_bench_cudagraph(
            lambda backend=backend: verify_greedy(logits, drafts, backend=backend), rep=50, return_mode="median")
    row["speedup_graph"] = row["reference_graph_us"] / row["fused_graph_us"]
    return row


def _table(rows: list[dict]) -> str:
    head = (f"{'c':>3} {'K':>2} {'dtype':>5} | {'launches':>11} | {'eager us':>17} {'x':>5} |"
            f" {'graph us':>15} {'x':>5}")
    lines = [head, f"{'':>12}| {'fused/ref':>11} | {'fused / ref':>17} {'':>5} | {'fused / ref':>15}"]
    for r in rows:
        lines.append(
            f"{r['c']:>3} {r['K']:>2} {r['dtype']:>5} | {r['fused_launches']:>4} / {r['reference_launches']:<4} |"
            f" {r['fused_eager_us']:>7.1f} / {r['reference_eager_us']:<7.1f} {r['speedup_eager']:>5.1f} |"
            f" {r['fused_graph_us']:>6.1f} / {r['reference_graph_us']:<6.1f} {r['speedup_graph']:>5.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the JSON results (default: a new run folder, "
                             "docs/results/<device>/kernels/<date>-<commit>/kernels.json)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit(f"bench_kernels.py needs a CUDA GPU, but torch {torch.__version__} sees none "
                 "(torch.cuda.is_available() is False); run it on the GPU machine.")
    try:
        import triton
        import peagle_lab.kernels.prepare_draft_inputs  # noqa: F401
    except ImportError as e:
        sys.exit(f"bench_kernels.py: {e}; run from the repository root with PYTHONPATH=. "
                 "or after `pip install -e .`")

    rows = [_row(c, K, d) for c in CONCURRENCY for K in NUM_SPECULATIVE_TOKENS for d in DTYPES]
    verify = [_verify_row(c, K) for c in VERIFY_CONCURRENCY for K in NUM_SPECULATIVE_TOKENS]
    result = dict(
        benchmark="draft batch construction: prepare_draft_inputs + fill_draft_hidden, "
                  "fused Triton vs PyTorch reference",
        **run_info(shlex.join(["python", *sys.argv])), cuda=torch.version.cuda,
        timing="medians in microseconds; eager: triton.testing.do_bench (warm-up excluded, "
               "L2 flushed between runs; host launch cost dominates at these sizes); graph: triton.testing.do_bench_cudagraph (replays of "
               "a captured graph). launches: CUDA kernel events of one torch.profiler call.",
        rows=rows,
        verify=verify,
    )
    if args.out is None:  # the device folder as the archive names them (h100, h200, ...), then this run's folder
        device = re.search(r"\b([ABH]\d{2,3})\b", result["device"].upper())
        args.out = (RESULTS / (device.group(1).lower() if device else "cuda") / "kernels" / folder_name(result)
                    / "kernels.json")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['device']}  torch {result['torch']}  triton {result['triton']}  H={H}  T=K+1")
    print(_table(rows))
    for r in verify:
        print(f"verify_greedy c={r['c']:>3} K={r['K']}: fused {r['fused_graph_us']:.1f} µs, "
              f"reference {r['reference_graph_us']:.1f} µs ({r['speedup_graph']:.2f}x)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

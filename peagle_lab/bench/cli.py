"""``peagle-lab bench``: the throughput sweep from the command line.

Also runnable as ``python -m peagle_lab.bench.cli`` (what scripts/gpu/bench_h200.sh does).
Three presets set the defaults, and every explicit flag overrides them:

* full (no flag): the issue-6 sweep — K ∈ {3,5,7} everywhere plus 1,2,4,6,8 at c ∈ {1,64},
  c ∈ {1..64}, chat + code + long, ≥ 4 prompts per cell (an H200 job);
* ``--quick``: chat only, c ∈ {1,2}, K=3, 24 new tokens, 2 prompts per cell (CPU, minutes);
* ``--tiny``: a random tiny model with a hashing tokenizer (seconds; for tests).

Answers stop at EOS by default (at most ``--max-new-tokens``, 1,024 unless a preset or flag says
otherwise), as the paper measures; ``--ignore-eos`` decodes every request to ``--max-new-tokens`` past EOS
instead, a throughput-stress variant that the JSON records (``config.ignore_eos``). ``--workloads
mt_bench humaneval`` are the paper's benchmarks (``humaneval`` is the ``code`` workload).

Writes ``bench.json`` (rewritten after every cell, so a cut-short run keeps what it
measured), ``bench.csv`` and ``report.html`` (with ``plotly.min.js`` beside it; skipped
with a note when plotly is absent) into ``--out``, then prints the headline table and goals.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

from ..config import COMPILE_MODES, DECODE_ATTENTION, METHODS, parse_window
from ..devices import DTYPES, resolve_device, resolve_dtype
from .schema import write_csv, write_json
from .sweep import SweepConfig, run_sweep
from .workloads import DEFAULT_WORKLOADS, WORKLOAD_ALIASES, WORKLOADS, HashTokenizer

PRESETS = {
    "full": dict(),
    "quick": dict(workloads=("chat",), concurrencies=(1, 2), ks=(3,), extra_ks=(), max_new_tokens=24, min_prompts=2,
                  reference_workloads=("chat",)),
    "tiny": dict(workloads=DEFAULT_WORKLOADS, concurrencies=(1, 2), ks=(2,), extra_ks=(3,), extra_ks_at=(2,),
                 max_new_tokens=8, min_prompts=2, long_context_tokens=(48, 160)),
}
# Flag dest → SweepConfig field, for the flags that map one to one.
_FIELDS = {f.name for f in fields(SweepConfig)}
_WORKLOAD_CHOICES = WORKLOADS + tuple(WORKLOAD_ALIASES)


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``bench`` flags to ``p`` (defaults None: the preset decides unless a flag is given)."""
    preset = p.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true", help="a reduced sweep that runs on a CPU in minutes")
    preset.add_argument("--tiny", action="store_true", help="a random tiny model (seconds; tests)")
    p.add_argument("--methods", nargs="+", choices=METHODS, help="default: all three")
    p.add_argument("-k", "--num-speculative-tokens", dest="ks", nargs="+", type=int, metavar="K",
                   help="K values measured at every concurrency (full: 3 5 7)")
    p.add_argument("--extra-k", dest="extra_ks", nargs="*", type=int, metavar="K",
                   help="more K values, only at --extra-k-at (full: 1 2 4 6 8); the flag alone: none")
    p.add_argument("--extra-k-at", dest="extra_ks_at", nargs="+", type=int, metavar="C",
                   help="concurrencies for --extra-k (full: 1 64)")
    p.add_argument("-c", "--concurrency", dest="concurrencies", nargs="+", type=int, metavar="C",
                   help="full: 1 2 4 8 16 32 64")
    p.add_argument("--workloads", nargs="+", choices=_WORKLOAD_CHOICES,
                   help="default: chat code long; mt_bench and humaneval (= code) are the paper's benchmarks")
    p.add_argument("--max-new-tokens", type=int,
                   help="per request, every cell: the cap on an answer, or with --ignore-eos its length (full: 1024)")
    p.add_argument("--min-prompts", type=int, help="prompts per cell at least (full: 4)")
    p.add_argument("--repeats", type=int, metavar="R",
                   help="timed passes per cell; the row is the pass of median TPS, extra.tps_runs lists all "
                        "(default 1)")
    p.add_argument("--continuous", type=int, metavar="N",
                   help="continuous batching at c > 1: N x c requests a cell, rows refilled as requests "
                        "finish (default 0: static batches of c)")
    p.add_argument("--refill-divisor", type=int, metavar="D",
                   help="with --continuous: admit new requests once about c / D rows are free (default 4)")
    p.add_argument("--no-compile-edges", action="store_true", help="compile layers only (SpecConfig.compile_edges)")
    p.add_argument("--no-compact-rows", action="store_true", help="keep static rows to the end (SpecConfig.compact_rows)")
    p.add_argument("--temperature", type=float, help="0 = greedy (default); >0 = rejection sampling")
    # not exclusive: the last one given wins, so a script's flags can be overridden after it
    p.add_argument("--stop-at-eos", dest="ignore_eos", action="store_const", const=False,
                   help="answers stop at EOS (the default)")
    p.add_argument("--ignore-eos", dest="ignore_eos", action="store_const", const=True,
                   help="throughput-stress variant: every request decodes --max-new-tokens past EOS")
    p.add_argument("--seed", type=int)
    p.add_argument("--max-batch-tokens", type=int, help="skip cells with c*(prompt+new) above this (default: no cap)")
    p.add_argument("--time-budget-s", type=float, help="skip the cells still waiting after this many seconds")
    p.add_argument("--long-context-tokens", nargs=2, type=int, metavar=("LO", "HI"),
                   help="long-context excerpt lengths (full: 2048 7680)")
    p.add_argument("--no-reference", action="store_true", help="skip transformers' static-cache generate")
    p.add_argument("--reference-workloads", nargs="+", choices=_WORKLOAD_CHOICES, help="default: chat code")
    p.add_argument("--reference-concurrency", nargs="+", type=int, metavar="C", help="default: 1")
    _add_graph_arguments(p)
    p.add_argument("--draft-window", metavar="N|none",
                   help="override the heads' drafting attention window (sliding_window): N positions, or none")
    p.add_argument("--compile", choices=COMPILE_MODES,
                   help="torch.compile the decode step (default auto: on CUDA)")
    p.add_argument("--decode-attention", choices=DECODE_ATTENTION,
                   help="decode steps' attention: triton (split-KV kernel), sdpa, or auto "
                        "(default: the kernel for T > 1 on CUDA)")
    p.add_argument("--kernel-backend", choices=["auto", "torch", "triton"],
                   help="draft-batch kernels (default auto: Triton on CUDA, PyTorch on CPU)")
    p.add_argument("--model", help="a HF folder or .gguf (default: the embedded SmolLM2)")
    p.add_argument("--eagle3-head", help="an EAGLE-3 head folder (default: the bundled one, else random)")
    p.add_argument("--peagle-head", help="a P-EAGLE head folder (default: the bundled one, else random)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N]")
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES], help="auto: bfloat16 on CUDA, else float32")
    p.add_argument("--out", default="bench-results", help="output folder (default: ./bench-results)")
    p.add_argument("--no-report", action="store_true", help="write JSON and CSV only")
    p.add_argument("--inline-plotlyjs", action="store_true", help="embed plotly.js in report.html")
    p.add_argument("--no-progress", action="store_true")


def _add_graph_arguments(p: argparse.ArgumentParser) -> None:
    """The CUDA-graph flags of ``bench``: the decode step's, the prefill's and the first draft's."""
    p.add_argument("--no-cuda-graphs", action="store_true")
    p.add_argument("--prefill-graphs", action="store_const", const=True, default=None,
                   help="prefill at padded widths, a CUDA graph per shape (default on CUDA; on a CPU: pad only)")
    p.add_argument("--eager-prefill", action="store_true",
                   help="prefill without CUDA graphs at the prompts' own width (SpecConfig.prefill_graphs=False)")
    first = p.add_mutually_exclusive_group()
    first.add_argument("--first-draft-graphs", action="store_const", const=True, default=None,
                       help="the first draft after a graphed prefill as one CUDA graph per padded shape (default)")
    first.add_argument("--eager-first-draft", dest="first_draft_graphs", action="store_const", const=False,
                       help="the first draft eagerly at the prompts' own width (SpecConfig.first_draft_graphs=False)")


def sweep_config(args) -> SweepConfig:
    """The ``SweepConfig`` for parsed ``args``: the preset, overridden by every flag given."""
    if args.tiny:
        given = [f for f, v in (("--model", args.model), ("--eagle3-head", args.eagle3_head),
                                ("--peagle-head", args.peagle_head)) if v]
        if given:
            raise ValueError(f"--tiny runs a random tiny model with random heads, so {', '.join(given)} "
                             "would be ignored; drop --tiny to measure them")
    values = dict(PRESETS["tiny" if args.tiny else "quick" if args.quick else "full"])
    for name in _FIELDS:
        v = getattr(args, name, None)
        if v is not None:
            values[name] = tuple(v) if isinstance(v, list) else v
    if args.no_reference:
        values["reference"] = False
    if args.no_cuda_graphs:
        values["cuda_graphs"] = False
    if args.no_compact_rows:
        values["compact_rows"] = False
    if args.no_compile_edges:
        values["compile_edges"] = False
    parse_window(getattr(args, "draft_window", None), "--draft-window")  # a bad value fails before the model loads
    if args.prefill_graphs and args.eager_prefill:
        raise ValueError("--prefill-graphs and --eager-prefill exclude each other")
    if args.prefill_graphs:
        values["prefill_graphs"] = True
    if args.eager_prefill:
        values["prefill_graphs"] = False
    return SweepConfig(**values)


def _with_window(drafters: dict, notes: dict, value: str | None) -> None:
    """Apply ``--draft-window`` to every drafter and record each one's window in the notes."""
    window = parse_window(value, "--draft-window")
    if window is not False:
        for d in drafters.values():
            d.config = dataclasses.replace(d.config, sliding_window=window)
    notes["draft_window"] = {m: d.config.sliding_window for m, d in drafters.items()}


def _models(args, cfg: SweepConfig, device, dtype, tmp: Path):
    """(target, tokenizer, drafters, reference folder or None, config notes) for the run."""
    target, tokenizer, drafters, ref, notes = _load_models(args, cfg, device, dtype, tmp)
    _with_window(drafters, notes, getattr(args, "draft_window", None))
    return target, tokenizer, drafters, ref, notes


def _load_models(args, cfg: SweepConfig, device, dtype, tmp: Path):
    spec = [m for m in cfg.methods if m != "baseline"]
    if args.tiny:
        from ..models.checkpoints import save_hf_folder
        from ..testing import tiny_drafter, tiny_target

        target = tiny_target().to(device=device, dtype=dtype)
        drafters = {m: tiny_drafter(target, m, seed=i + 1) for i, m in enumerate(spec)}
        ref = save_hf_folder(tiny_target(), tmp / "tiny") if cfg.reference else None
        return (target, HashTokenizer(target.config.vocab_size), drafters, ref,
                {"model": "tiny random (peagle_lab.testing.tiny_target)", "heads": {m: "random (tiny)" for m in spec}})
    from .. import zoo
    from ..heads import default_head
    from ..heads.io import head_digest, load_head

    path = Path(args.model) if args.model else zoo.convert_default(quiet=True)
    target, tokenizer = zoo.load_model(path, dtype, device, quiet=True)
    drafters, heads, digests = {}, {}, {}
    for m in spec:
        head = getattr(args, f"{m}_head", None)
        if head:
            drafters[m], heads[m] = load_head(head, target, dtype=dtype, device=device), str(head)
        else:
            drafters[m], heads[m], head = default_head(target, m)
        if head is not None:  # which weights, wherever they lay (a random head has none)
            digests[m] = head_digest(head)
    notes = {"model": str(path) if args.model else "SmolLM2-135M-Instruct (embedded default)", "heads": heads,
             "head_digests": digests}
    ref = path if path.is_dir() and cfg.reference else None
    if cfg.reference and ref is None:
        notes["reference_note"] = "transformers reference skipped: it needs a HF folder, not a GGUF file"
    return target, tokenizer, drafters, ref, notes


def run_bench(args) -> int:
    """Run the sweep for parsed ``args`` and write JSON, CSV and HTML into ``args.out``.

    Raises:
        ValueError: bad flag values, a missing model or head, an unbuildable workload.
    """
    from ..provenance import run_info

    cfg = sweep_config(args)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = getattr(args, "command_line", None) or shlex.join(["peagle-lab", *sys.argv[1:]])
    info = run_info(command)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="peagle_bench_") as tmp:
        target, tokenizer, drafters, ref, notes = _models(args, cfg, device, dtype, Path(tmp))
        notes.update(device=str(device), dtype=str(dtype).removeprefix("torch."))
        print(f"bench: {notes['model']} on {device} ({notes['dtype']}); heads: "
              + (", ".join(f"{m}: {o}" for m, o in notes["heads"].items()) or "none"), flush=True)
        result = run_sweep(target, tokenizer, drafters, cfg, run_info=info, extra_config=notes,
                           reference_folder=ref, progress=not args.no_progress,
                           on_update=lambda r: write_json(r, out / "bench.json"))
    write_json(result, out / "bench.json")
    write_csv(result, out / "bench.csv")
    written = [out / "bench.json", out / "bench.csv"]
    if not args.no_report:
        try:
            from .report import write_report

            written.append(write_report(result, out / "report.html", args.inline_plotlyjs))
        except ModuleNotFoundError as e:
            if (e.name or "").partition(".")[0] != "plotly":
                raise
            print(f"bench: plotly is not installed, so no HTML; build it elsewhere with "
                  f"`python -m peagle_lab.bench.report {out / 'bench.json'}`")
    from .report import goals_table, headline_table

    print(headline_table(result))
    print(goals_table(result))
    if result.skipped:
        print(f"{len(result.skipped)} cells skipped (reasons in bench.json)")
    if any("random" in str(o) for o in notes["heads"].values()):
        print("note: heads marked 'random' are untrained: they draft noise (AL≈1), so these numbers measure "
              "step costs, not what speculation can gain")
    print(f"bench: {len(result.rows)} rows in {time.perf_counter() - t0:.0f} s; wrote "
          + ", ".join(str(p) for p in written))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m peagle_lab.bench.cli", description=__doc__.split("\n")[0])
    add_bench_arguments(p)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.command_line = shlex.join(["python", "-m", "peagle_lab.bench.cli", *argv])
    try:
        return run_bench(args)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

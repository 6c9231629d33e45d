"""The scale lab: what one decode step costs at the shapes of larger targets, measured in this engine.

A speculative step is ``verify`` (the target over K + 1 tokens a request), ``prep`` (the draft
batch) and ``draft`` (one drafter pass for P-EAGLE, K for EAGLE-3), plus the host's share. The
SmolLM2 sweep measures them at one small shape; here the same :class:`~peagle_lab.engine.SpecDecoder`
(CUDA graphs, compiled layers, the split-KV attention kernel) decodes with **random weights** at
the shapes of the paper's targets, so the costs are this engine's costs, not a roofline's.

Method (written into the JSON as ``method``):

* Every cell is one engine: a warm-up ``generate`` (compiles, captures), then a measured one of
  ``new_tokens`` steps; the medians of the step trace give verify / prep / draft, and
  ``step_ms`` is decode time over steps. Random heads accept almost nothing, so every step
  verifies K + 1 tokens and drafts K, as a trained head's step does; acceptance comes from
  elsewhere (``peagle_lab.lab.predict``).
* Large targets are measured at ``layers`` = (2, 4) decoder layers and the verify time is
  scaled per layer to the full depth: ``verify(L) = v4 + (L - 4) · (v4 - v2) / 2``. prep, draft and
  host time do not depend on the target's depth and come from the 4-layer engine. SmolLM2 is
  also measured at full depth, which checks the rule (``layer_check``).
* MoE targets (GPT-OSS-20B, Qwen3-Coder-30B-A3B) run attention as published and a dense MLP as
  wide as their active experts (``active_mlp``): what one decode token reads. K + 1 verify tokens
  route to more distinct experts than one token does (``expected_experts`` says how many), so one
  real routed-expert layer also runs beside its dense stand-in (``scale_moe``), and the costs gain a
  shape ``NAME+moe`` with that difference in every layer.
* Every request of a cell holds the same prompt (``prompt_tokens``), unless ``prompt_range`` draws each one's
  length uniformly from [LO, HI] (seeded): a ragged batch, as a continuous batch's requests are. The
  decode-attention kernel gives each (request, KV head) one program, so the longest request sets the pace and
  a ragged batch costs more than a uniform one at the same mean context (``peagle_lab.lab.predict`` keeps
  such runs apart). Each cell records the contexts its steps attended to (``mean_context``, ``longest_context``:
  ``engine.context_summary``), which ``scale_costs.step_costs_fit`` fits the step on.
* ``scale_costs`` turns the rows into full-depth costs per (shape, method, depth, K, c) and
  interpolates in K (``step_costs``): what ``peagle_lab.lab.predict`` reads.
* The grid (``GPU_GRID``, about 300 engine cells in about five minutes): K 1, 4 and 8 (SmolLM2 also
  3 and 5; other K interpolate linearly, as every part of a step is close to linear in K); every
  c from 1 to 64 at GPT-OSS-20B, the paper's model, and c = 1, 8, 64 elsewhere; P-EAGLE drafters
  of 1, 2 and 4 layers at SmolLM2 and GPT-OSS-20B, 1 and 4 elsewhere (EAGLE-3: 1 layer). Shapes run
  in priority order and a time budget stops starting cells, so a slow device loses the last shapes.

Command line (``peagle-lab scale``; ``scripts/gpu/scale_lab_gpu.sh`` runs it on a GPU)::

    peagle-lab scale --out scale.json                 # the GPU grid (about five minutes)
    peagle-lab scale --tiny --out scale_cpu.json      # tiny shapes on a CPU (tests, rehearsal)
    peagle-lab scale --shapes smollm2-135m -c 64 --prompt-range 50 1450 --out ragged.json  # a ragged batch
"""
from __future__ import annotations

import argparse
import gc
import json
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ..config import DrafterConfig, SpecConfig
from ..drafter import Drafter
from ..engine import SpecDecoder, context_summary
from ..models.llama import LlamaConfig, LlamaModel
from ..provenance import run_info
from .scale_costs import (CONTEXTS, cell_seed, drawn_lengths, experts_read, full_depth_costs, layer_check, step_costs,
                          with_short_rows)
from .scale_moe import measure_moe

__all__ = ["ScaleShape", "SHAPES", "PROMPT_TOKENS", "ScaleGrid", "GPU_GRID", "TINY_GRID", "expected_experts", "prompt_lengths",
           "measure_cell",
           "run_scale", "full_depth_costs", "layer_check", "step_costs", "main"]

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class ScaleShape:
    """A target's shape as its config.json publishes it; MoE targets as attention + their active MLP."""

    name: str
    config: LlamaConfig
    source: str  # where the numbers come from
    draft_vocab_size: int = 32000  # EAGLE-3 heads' usual draft vocabulary
    experts: int = 0  # MoE: experts per layer (0: dense)
    top_k: int = 0  # MoE: experts a token routes to
    expert_intermediate: int = 0  # MoE: one expert's intermediate size

    @property
    def active_mlp(self) -> int:
        """The dense MLP width measured, which is the MLP itself or top_k experts side by side."""
        return self.config.intermediate_size


def _shape(name, source, vocab, hidden, inter, layers, heads, kv, hd, *, tie=False, qk_norm=False, theta=500000.0,
           draft_vocab=32000, experts=0, top_k=0, expert_inter=0) -> ScaleShape:
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, rope_theta=theta,
                      tie_word_embeddings=tie, qk_norm=qk_norm, model_type="qwen3" if qk_norm else "llama")
    return ScaleShape(name, cfg, source, draft_vocab, experts, top_k, expert_inter)


SHAPES: dict[str, ScaleShape] = {s.name: s for s in (
    ScaleShape("smollm2-135m", LlamaConfig(), "HuggingFaceTB/SmolLM2-135M-Instruct config.json", 32768),
    _shape("llama-3.2-1b", "meta-llama/Llama-3.2-1B config.json", 128256, 2048, 8192, 16, 32, 8, 64, tie=True),
    _shape("llama-3.1-8b", "meta-llama/Llama-3.1-8B config.json", 128256, 4096, 14336, 32, 32, 8, 128),
    _shape("gpt-oss-20b", "openai/gpt-oss-20b config.json (32 experts, top-4, 2880 wide; MLP = 4 experts)",
           201088, 2880, 4 * 2880, 24, 64, 8, 64, theta=150000.0, experts=32, top_k=4, expert_inter=2880),
    _shape("qwen3-coder-30b-a3b", "Qwen/Qwen3-Coder-30B-A3B-Instruct config.json (128 experts, top-8, 768 wide; "
           "MLP = 8 experts)", 151936, 2048, 8 * 768, 48, 32, 4, 128, qk_norm=True, theta=10000000.0,
           experts=128, top_k=8, expert_inter=768),
)}


def expected_experts(shape: ScaleShape, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens route to in one layer, if each picks top_k of E uniformly.

    E · (1 − (1 − top_k / E)^tokens): one decode token reads top_k experts, a K = 7 verify of 8
    tokens about 21 of GPT-OSS-20B's 32.

    >>> round(expected_experts(SHAPES["gpt-oss-20b"], 1), 2), round(expected_experts(SHAPES["gpt-oss-20b"], 8), 1)
    (4.0, 21.0)
    """
    return experts_read(shape.experts, shape.top_k, tokens)


PROMPT_TOKENS = 160  # the default context a request holds when its decode starts (``--prompt-tokens``)


@dataclass(frozen=True)
class ScaleGrid:
    """What to measure (the JSON records it as ``grid``)."""

    shapes: tuple[str, ...]  # in priority order: a time budget drops the last
    concurrency: dict  # shape -> its concurrencies
    ks: tuple[int, ...] = (1, 4, 8)  # measured K; others interpolate (every part of a step is ~linear in K)
    depths: tuple[int, ...] = (1, 4)  # P-EAGLE drafter layers
    shape_ks: dict = field(default_factory=dict)  # shape -> its own ks (where a check needs more)
    shape_depths: dict = field(default_factory=dict)  # shape -> its own depths
    layers: tuple[int, int] = (2, 4)  # target layers measured for the per-layer rule
    full_depth: tuple[str, ...] = ("smollm2-135m",)  # shapes also measured whole
    prompt_tokens: int = PROMPT_TOKENS  # context a request holds when its decode starts
    # ragged: each request's prompt drawn uniformly from [lo, hi] tokens (prompt_tokens then records the mean)
    prompt_range: tuple[int, int] | None = None
    short_rows: int = 0  # of each cell's c requests, this many hold a 1-token prompt (a continuous batch's idle rows)
    new_tokens: int = 24  # measured steps a cell (random heads accept ~nothing: one token a step)
    device: str = "cuda"
    dtype: str = "bfloat16"
    compile: str = "auto"
    time_budget_s: float = 300.0
    tiny: bool = False  # shrink every shape (CPU tests)

    def __post_init__(self) -> None:
        unknown = [s for s in self.shapes if s not in SHAPES]
        if unknown:
            raise ValueError(f"unknown shapes {unknown}; expected some of {', '.join(SHAPES)}")
        if not self.ks or min(self.ks) < 1 or max(self.ks) > 16:
            raise ValueError(f"ks={self.ks!r}: expected K values in [1, 16]")
        lo, hi = self.layers
        if not 1 <= lo < hi:
            raise ValueError(f"layers={self.layers!r}: expected two layer counts 1 <= a < b")
        if not 1 <= self.prompt_tokens <= 32768:
            raise ValueError(f"prompt_tokens={self.prompt_tokens!r}: expected a context of 1 to 32768 tokens")
        if self.prompt_range is not None:
            lo, hi = self.prompt_range
            if not 1 <= lo <= hi <= 32768:
                raise ValueError(f"prompt_range={self.prompt_range!r}: expected 1 <= LO <= HI <= 32768 tokens")
            object.__setattr__(self, "prompt_range", (lo, hi))
            object.__setattr__(self, "prompt_tokens", (lo + hi) // 2)
        bad_c = {s: cs for s, cs in self.concurrency.items() if not cs or min(cs) < 1 or max(cs) > 1024}
        if bad_c:
            raise ValueError(f"concurrency={bad_c!r}: expected concurrencies in [1, 1024]")
        least = min(min(self.concurrency.get(s, (1,))) for s in self.shapes)
        if not 0 <= self.short_rows < least:
            raise ValueError(f"short_rows={self.short_rows!r}: expected 0 to {least - 1}, fewer than the smallest c "
                             "measured, so every cell keeps a request of the drawn length")

    def ks_of(self, shape: str) -> tuple[int, ...]:
        return tuple(self.shape_ks.get(shape, self.ks))

    def depths_of(self, shape: str) -> tuple[int, ...]:
        return tuple(self.shape_depths.get(shape, self.depths))


# About 285 engine cells: every c at GPT-OSS-20B (the paper's per-concurrency figures), c = 1, 8, 64 elsewhere;
# K 1, 4, 8 (SmolLM2 also 3 and 5, for the check against its sweep); P-EAGLE depth 1, 2, 4 at SmolLM2 and
# GPT-OSS-20B, 1 and 4 elsewhere
GPU_GRID = ScaleGrid(
    shapes=("smollm2-135m", "gpt-oss-20b", "qwen3-coder-30b-a3b", "llama-3.1-8b", "llama-3.2-1b"),
    concurrency={"smollm2-135m": (1, 8, 64), "gpt-oss-20b": CONCURRENCIES, "llama-3.1-8b": (1, 8, 64),
                 "llama-3.2-1b": (1, 8, 64), "qwen3-coder-30b-a3b": (1, 8, 64)},
    shape_ks={"smollm2-135m": (1, 3, 4, 5, 8)}, shape_depths={"smollm2-135m": (1, 2, 4), "gpt-oss-20b": (1, 2, 4)})
TINY_GRID = replace(GPU_GRID, shapes=("smollm2-135m", "gpt-oss-20b"),
                    concurrency={"smollm2-135m": (1, 64), "gpt-oss-20b": (1, 8, 64)}, ks=(1, 4, 8), depths=(1, 2, 4),
                    shape_ks={}, shape_depths={}, prompt_tokens=12, new_tokens=6, device="cpu", dtype="float32",
                    compile="off", time_budget_s=120.0, tiny=True)


def tiny_config(cfg: LlamaConfig, layers: int) -> LlamaConfig:
    """A shape shrunk for a CPU: every width / 16 or less, the head layout kept where it divides."""
    return replace(cfg, vocab_size=512, hidden_size=64, intermediate_size=max(cfg.intermediate_size // 64, 32),
                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def build_target(shape: ScaleShape, layers: int, grid: ScaleGrid) -> LlamaModel:
    """Random weights at ``shape`` with ``layers`` decoder layers, made on the device (no host init)."""
    cfg = replace(shape.config, num_hidden_layers=layers)
    if grid.tiny:
        cfg = tiny_config(cfg, layers)
    torch.manual_seed(0)
    with torch.device(grid.device):
        model = LlamaModel(cfg)
    return model.to(device=grid.device, dtype=getattr(torch, grid.dtype)).eval().requires_grad_(False)


def build_drafter(target: LlamaModel, method: str, layers: int, draft_vocab_size: int) -> Drafter:
    """The project's drafter for ``target`` with random weights, made on the target's device
    (``drafter.random_drafter`` draws on the host, seconds a head at GPT-OSS-20B's width)."""
    cfg = DrafterConfig.for_target(target.config, method, layers, min(draft_vocab_size, target.config.vocab_size))
    with torch.device(target.device):
        drafter = Drafter(cfg)
        drafter.reset_parameters()  # normal(0, 0.02) linears, unit norms, as random_drafter
    drafter = drafter.to(dtype=target.dtype).attach_embeddings(target.embed_tokens.weight)
    return drafter.eval().requires_grad_(False)


def prompt_lengths(grid: ScaleGrid, c: int, gen: torch.Generator) -> list[int]:
    """The ``c`` requests' prompt lengths: ``prompt_tokens`` each, or drawn uniformly from ``prompt_range`` by ``gen``.

    >>> g = replace(TINY_GRID, prompt_range=(5, 9))
    >>> lengths = prompt_lengths(g, 64, torch.Generator().manual_seed(0))
    >>> min(lengths), max(lengths), g.prompt_tokens, prompt_lengths(TINY_GRID, 2, torch.Generator())
    (5, 9, 7, [12, 12])
    """
    if grid.prompt_range is None:
        return with_short_rows([grid.prompt_tokens] * c, grid.short_rows)
    return with_short_rows(drawn_lengths(*grid.prompt_range, c, gen), grid.short_rows)


def measure_cell(target: LlamaModel, drafter, method: str, k: int, c: int, grid: ScaleGrid) -> dict:
    """One engine at (method, K, c): warm-up generate, then the medians of a measured one (ms), and the contexts
    its steps attended to (``scale_costs.CONTEXTS``, tokens)."""
    cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=grid.new_tokens, compile=grid.compile)
    engine = SpecDecoder(target, drafter, cfg)
    gen = torch.Generator().manual_seed(cell_seed(c, k))
    vocab = target.config.vocab_size
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in prompt_lengths(grid, c, gen)]
    engine.generate(prompts, eos_token_ids=())
    res = engine.generate(prompts, eos_token_ids=())
    trace = res.trace[2:] or res.trace
    med = lambda xs: statistics.median(xs) if xs else 0.0  # noqa: E731
    step = 1e3 * res.metrics.decode_s / max(res.metrics.num_steps, 1)
    parts = {"verify_ms": med([s.verify_ms for s in trace]), "prep_ms": med([s.prep_ms for s in trace]),
             "draft_ms": med([s.draft_ms for s in trace])}
    return {**parts, "step_ms": step, "host_ms": max(step - sum(parts.values()), 0.0),
            "steps": res.metrics.num_steps, "warmup_s": round(engine.warmup_s, 3),
            **{f: v for f, v in context_summary(res.trace).items() if f in CONTEXTS}}


def _cells(shape: ScaleShape, grid: ScaleGrid):
    """(layers, method, depth, K, c) of one shape: every method at the measured depth, EAGLE-3 at the other."""
    lo, hi = grid.layers
    full = shape.config.num_hidden_layers
    main = full if shape.name in grid.full_depth else hi
    runs = [(main, "eagle3", 1)] + [(main, "peagle", d) for d in grid.depths_of(shape.name)]
    runs += [(n, "eagle3", 1) for n in (lo, hi) if n != main]
    for layers, method, depth in runs:
        for c in grid.concurrency.get(shape.name, (1,)):
            for k in grid.ks_of(shape.name):
                yield layers, method, depth, k, c


def _measure_shape(shape: ScaleShape, grid: ScaleGrid, deadline: float, rows: list, skipped: list, log,
                   every=lambda: None) -> None:
    """Every cell of one shape into ``rows`` until ``deadline`` (the rest into ``skipped``); ``every()``
    after each cell."""
    models: dict = {}  # one target (and its drafters) on the device at a time
    for layers, method, depth, k, c in _cells(shape, grid):
        if time.perf_counter() > deadline:
            skipped.append(f"{shape.name} {method} d{depth} L{layers} K{k} c{c}")
            continue
        if models.get("layers") != layers:
            models.clear()
            torch.cuda.empty_cache() if grid.device.startswith("cuda") else None
            models.update(layers=layers, target=build_target(shape, layers, grid))
        target = models["target"]
        if (method, depth) not in models:  # drafters are built once a target: they do not depend on K or c
            models[(method, depth)] = build_drafter(target, method, depth, shape.draft_vocab_size)
        row = {"shape": shape.name, "layers": layers, "method": method, "depth": depth, "k": k, "concurrency": c,
               **measure_cell(target, models[(method, depth)], method, k, c, grid)}
        rows.append(row)
        log(json.dumps({k_: round(v, 4) if isinstance(v, float) else v for k_, v in row.items()}))
        if grid.device.startswith("cuda"):
            gc.collect()  # an engine's graphs and caches go with it, not at some later collection
        every()


def run_scale(grid: ScaleGrid, log=print, checkpoint=None) -> dict:
    """Measure the grid (shapes in order until ``time_budget_s``); the JSON document.

    A shape that fails (out of memory, a compile error) is recorded in ``errors`` and the next one
    runs; ``checkpoint(doc)`` gets the document so far after every shape, so a killed run leaves one.
    """
    t0, rows, skipped, errors, moe = time.perf_counter(), [], [], {}, {}
    doc = {"what": "decode-step costs at paper targets' shapes, random weights, this engine", "method": __doc__,
           "grid": asdict(grid), "shapes": {n: _shape_info(SHAPES[n]) for n in grid.shapes},
           "rows": rows, "moe": moe, "skipped": skipped, "errors": errors}
    _raise_recompile_limits()

    def save() -> None:
        doc.update(wall_s=round(time.perf_counter() - t0, 1), costs=full_depth_costs(doc), layer_check=layer_check(doc))
        if checkpoint is not None:
            checkpoint(doc)

    for name in grid.shapes:
        shape = SHAPES[name]
        try:
            _measure_shape(shape, grid, t0 + grid.time_budget_s, rows, skipped, log,
                           every=lambda: save() if len(rows) % 10 == 0 else None)
        except (RuntimeError, ValueError, MemoryError) as e:  # torch.OutOfMemoryError is a RuntimeError
            errors[name] = f"{type(e).__name__}: {str(e)[:500]}"
            log(f"{name}: {errors[name]}")
        if grid.device.startswith("cuda"):
            torch.cuda.empty_cache()
        save()
    # last (a few seconds): a device without the grouped GEMM fails here, after every engine cell
    for name in grid.shapes:
        if SHAPES[name].experts and any(r["shape"] == name for r in rows):
            moe[name] = _moe(SHAPES[name], grid)
    save()
    return doc


def _raise_recompile_limits() -> None:
    """Every shape compiles its own layers (parameter sizes are static to dynamo): room for all of them,
    where the engine's limits (``engine.compiled``) are sized for one model."""
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 1024))


def _moe(shape: ScaleShape, grid: ScaleGrid) -> list[dict] | str:
    """A real MoE layer against its dense stand-in at every verify and decode token count of the grid
    (``scale_moe``); the error text where the device cannot run it."""
    cs = grid.concurrency.get(shape.name, (1,))
    tokens = sorted({c * (k + 1) for c in cs for k in grid.ks_of(shape.name)} | set(cs))
    cfg, experts, inter = shape.config, shape.experts, shape.expert_intermediate
    if grid.tiny:
        cfg, experts, inter = tiny_config(cfg, 1), min(experts, 8), 16
    try:
        return measure_moe(cfg, experts, shape.top_k, inter, tokens, torch.device(grid.device),
                           getattr(torch, grid.dtype))
    except (RuntimeError, NotImplementedError) as e:  # e.g. no grouped GEMM for this device or dtype
        return f"{type(e).__name__}: {e}"


def _shape_info(shape: ScaleShape) -> dict:
    return {"source": shape.source, "layers": shape.config.num_hidden_layers, "hidden": shape.config.hidden_size,
            "mlp": shape.active_mlp, "vocab": shape.config.vocab_size, "heads": shape.config.num_attention_heads,
            "kv_heads": shape.config.num_key_value_heads, "head_dim": shape.config.head_dim,
            "experts": shape.experts, "top_k": shape.top_k, "expert_intermediate": shape.expert_intermediate}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="peagle-lab scale", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the JSON to write")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU (tests, rehearsal)")
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES), help="shapes in priority order")
    ap.add_argument("-k", nargs="+", type=int, help="measured K (default 1 3 5 8)")
    ap.add_argument("--depths", nargs="+", type=int, help="P-EAGLE drafter layers (default 1 2 4)")
    ap.add_argument("--compile", choices=["auto", "on", "off"])
    ap.add_argument("--device")
    ap.add_argument("--time-budget-s", type=float)
    prompts = ap.add_mutually_exclusive_group()
    prompts.add_argument("--prompt-tokens", type=int,
                         help="context a request holds when its decode starts (default 160; answers decoded to EOS "
                              "average far longer contexts, see docs/results/*/answer_length/)")
    prompts.add_argument("--prompt-range", nargs=2, type=int, metavar=("LO", "HI"),
                         help="a ragged batch: each request's prompt drawn uniformly from LO to HI tokens (seeded), "
                              "as the requests of a continuous batch differ in context")
    ap.add_argument("--short-rows", type=int, metavar="N",
                    help="N of each cell's requests hold a one-token prompt: stand-ins for the idle rows of a "
                         "continuous batch that drains (with --concurrency above N)")
    ap.add_argument("-c", "--concurrency", nargs="+", type=int, help="concurrencies for every shape (default per shape)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    grid = TINY_GRID if args.tiny else GPU_GRID
    changes = {"shapes": tuple(args.shapes or ()), "ks": tuple(args.k or ()), "depths": tuple(args.depths or ()),
               "compile": args.compile, "device": args.device, "time_budget_s": args.time_budget_s,
               "prompt_tokens": args.prompt_tokens, "prompt_range": tuple(args.prompt_range or ()),
               "short_rows": args.short_rows}
    if args.concurrency:
        changes["concurrency"] = {s: tuple(args.concurrency) for s in SHAPES}
    grid = replace(grid, **{f: v for f, v in changes.items() if v is not None and v != ()})
    if args.k or args.depths:  # flags name the grid for every shape
        grid = replace(grid, shape_ks={} if args.k else grid.shape_ks, shape_depths={} if args.depths else grid.shape_depths)
    if grid.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("the scale lab's default grid needs CUDA; use --tiny (or --device cpu) on a CPU")
    info = run_info(shlex.join(["peagle-lab", "scale", *(argv if argv is not None else sys.argv[1:])]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(doc: dict) -> None:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({**info, **doc}, indent=1) + "\n")
        tmp.replace(out)

    doc = run_scale(grid, log=lambda line: print(line, flush=True), checkpoint=write)
    print(f"wrote {out}: {len(doc['rows'])} cells in {doc['wall_s']} s; skipped {len(doc['skipped'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

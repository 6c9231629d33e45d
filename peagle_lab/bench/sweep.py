"""The throughput sweep: method × K × concurrency × workload, every cell in our ``SpecDecoder``.

Fairness rules, as issue 6 sets them:

* baseline, EAGLE-3 and P-EAGLE run in the same engine (same target code, KV-cache layout,
  kernels and CUDA-graph treatment), on the same prompts with the same max new tokens;
  each method is compared at its own best K (``analysis.best_k``);
* a cell at concurrency ``c`` decodes ``c·⌈min_prompts/c⌉`` prompts (the first ones of the
  workload) in batches of exactly ``c``, so every batch has one shape;
* warm-up is excluded: each cell gets a fresh engine whose KV cache is sized for the
  cell's longest prompt first (cache growth would drop captured graphs), then a short
  untimed pass over each of its batches captures every CUDA graph it needs (the decode
  shapes and the prefill draft pass of each prompt length) before the timed pass;
* the outside reference (transformers' static-cache ``generate``) is measured in the
  same run on the same prompts (``peagle_lab.bench.reference``).

Per cell the row holds TPS and TPOT (``engine.Metrics`` definitions, prefill included in
TPS), AL and per-position acceptance, and the medians of the per-step verify / prep /
draft times from the engine's trace. Cells that cannot run (time budget, the batch-token
cap, out of memory) are listed in ``result.skipped`` with the reason.
"""
from __future__ import annotations

import gc
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch

from ..acceptance import acceptance_length, per_position_acceptance
from ..config import BACKENDS, COMPILE_MODES, MAX_K, METHODS, SpecConfig, check_choice, check_int
from ..engine import GenerationResult, SpecDecoder, context_summary
from .schema import BenchResult, BenchRow, SkippedCell
from .workloads import DEFAULT_WORKLOADS, WORKLOAD_ALIASES, WORKLOAD_SIZES, WORKLOADS, Prompt, load_workload


@dataclass(frozen=True)
class SweepConfig:
    """What one sweep measures. The defaults are the full H200 sweep of issue 6."""

    methods: tuple[str, ...] = METHODS
    ks: tuple[int, ...] = (3, 5, 7)  # K values measured at every concurrency
    extra_ks: tuple[int, ...] = (1, 2, 4, 6, 8)  # more K values (for AL vs K), only at extra_ks_at
    extra_ks_at: tuple[int, ...] = (1, 64)  # the concurrencies where extra_ks run (cheap ones)
    concurrencies: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    workloads: tuple[str, ...] = DEFAULT_WORKLOADS  # any of WORKLOADS ("humaneval" is read as "code")
    temperature: float = 0.0  # 0: greedy verification; > 0: rejection sampling
    max_new_tokens: int = 1024  # per request, every cell: the cap on an answer (ignore_eos: its fixed length)
    min_prompts: int = 4  # a cell decodes c·⌈min_prompts/c⌉ prompts, in batches of c
    # timed passes over a cell's batches after its warm-up: the row is the pass of median TPS, and with
    # more than one, extra["tps_runs"] lists every pass's TPS (a c = 64 cell is one batch, whose one
    # prefill can swing by a factor of two between cells on the H200)
    repeats: int = 1
    # > 0: cells at c > 1 batch continuously (SpecDecoder.generate(..., concurrency=c)) over
    # max(min_prompts, continuous·c) requests, the workload's prompts taken in turn (repeated when it
    # has fewer); 0: static batches of c, each decoding until its slowest request is done
    continuous: int = 0
    refill_divisor: int = 4  # SpecConfig.refill_divisor: continuous cells admit once about c / this rows are free
    compact_rows: bool = True  # SpecConfig.compact_rows: static batches shrink as their requests finish
    # False (default): answers stop at EOS, as the paper measures; True: every request decodes max_new_tokens
    # past EOS (vLLM's --ignore-eos), a throughput-stress variant whose rows say so (config.ignore_eos)
    ignore_eos: bool = False
    seed: int = 0  # prompt selection and sampling
    cuda_graphs: bool = True
    prefill_graphs: bool | str = "auto"  # SpecConfig.prefill_graphs: "auto" = graphed where CUDA graphs run
    first_draft_graphs: bool = True  # SpecConfig.first_draft_graphs: False drafts the first draft eagerly
    compile: str = "auto"  # torch.compile the decode step: "auto" (on CUDA), "on" or "off"
    compile_edges: bool = True  # SpecConfig.compile_edges: with compile, the work around the layers too
    # SpecConfig.decode_attention: "auto" (the kernel for T > 1 on CUDA), "triton" or "sdpa"
    decode_attention: str = "auto"
    kernel_backend: str = "auto"  # draft-batch kernels: "auto" (Triton on CUDA), "torch" or "triton"
    max_batch_tokens: int | None = None  # skip cells whose KV block c·(prompt + new) exceeds this
    long_context_tokens: tuple[int, int] = (2048, 7680)  # long-context excerpt lengths
    reference: bool = True  # measure transformers' static-cache generate too
    reference_workloads: tuple[str, ...] = ("chat", "code")  # of those swept
    reference_concurrency: tuple[int, ...] = (1,)
    time_budget_s: float | None = None  # cells still waiting when it runs out are skipped

    def __post_init__(self) -> None:
        check_choice("kernel_backend", self.kernel_backend, BACKENDS)
        check_choice("compile", self.compile, COMPILE_MODES)
        for name in ("workloads", "reference_workloads"):  # aliases to their canonical names, once
            if all(isinstance(w, str) for w in getattr(self, name)):
                names = [WORKLOAD_ALIASES.get(w, w) for w in getattr(self, name)]
                object.__setattr__(self, name, tuple(dict.fromkeys(names)))
        for name, allowed in (("methods", METHODS), ("workloads", WORKLOADS), ("reference_workloads", WORKLOADS)):
            bad = [v for v in getattr(self, name) if v not in allowed]
            if bad or (name != "reference_workloads" and not getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)!r}: each must be one of {', '.join(allowed)}")
        if any(m != "baseline" for m in self.methods) and not self.ks:
            raise ValueError("ks is empty; give at least one K for eagle3/peagle")
        for k in self.ks + self.extra_ks:
            check_int("K", k, 1, MAX_K)
        for c in self.concurrencies + self.extra_ks_at + self.reference_concurrency:
            check_int("concurrency", c, 1, 4096)
        if not self.concurrencies:
            raise ValueError("concurrencies is empty; give at least one")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not 0 <= self.temperature <= 100:
            raise ValueError(f"temperature={self.temperature!r} must be a number in [0, 100]")
        check_int("max_new_tokens", self.max_new_tokens, 1, 1 << 16)
        check_int("min_prompts", self.min_prompts, 1, 4096)
        check_int("repeats", self.repeats, 1, 100)
        check_int("continuous", self.continuous, 0, 64)
        check_int("refill_divisor", self.refill_divisor, 1, 4096)
        if self.max_batch_tokens is not None:
            check_int("max_batch_tokens", self.max_batch_tokens, 1)
        lo, hi = self.long_context_tokens
        if not 1 <= lo <= hi:
            raise ValueError(f"long_context_tokens={self.long_context_tokens!r} must be (lo, hi) with 1 <= lo <= hi")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s={self.time_budget_s!r} must be > 0 (or None for no budget)")

    def num_prompts(self, concurrency: int) -> int:
        """Requests a cell at ``concurrency`` decodes: whole batches of at least ``min_prompts``, or
        with ``continuous`` at c > 1, ``max(min_prompts, continuous·c)``.

        >>> SweepConfig(min_prompts=16).num_prompts(64), SweepConfig(min_prompts=16, continuous=4).num_prompts(64)
        (64, 256)
        """
        if self.batches_continuously(concurrency):
            return max(self.min_prompts, self.continuous * concurrency)
        return concurrency * math.ceil(self.min_prompts / concurrency)

    def batches_continuously(self, concurrency: int) -> bool:
        return self.continuous > 0 and concurrency > 1


@dataclass(frozen=True)
class Cell:
    workload: str
    method: str
    k: int  # 0 for baseline
    concurrency: int


def plan_cells(cfg: SweepConfig) -> list[Cell]:
    """Every cell in run order: the main grid first, then the extra K values.

    Each (workload, c) column holds all methods and K values next to each other, so a run
    cut short by the time budget loses whole columns (and the extra K values first), never
    one method of a comparison. Columns run in the order the concurrencies are given, so a
    budget that may run out can be spent on the cheap column first (``-c 64 1``).

    >>> cells = plan_cells(SweepConfig(ks=(3,), extra_ks=(), concurrencies=(4, 1), workloads=("chat",)))
    >>> [(c.concurrency, c.method, c.k) for c in cells]
    [(4, 'baseline', 0), (4, 'eagle3', 3), (4, 'peagle', 3), (1, 'baseline', 0), (1, 'eagle3', 3), (1, 'peagle', 3)]
    """
    spec = [m for m in cfg.methods if m != "baseline"]
    ks = tuple(dict.fromkeys(cfg.ks))
    cells = [Cell(w, m, k, c) for w in cfg.workloads for c in dict.fromkeys(cfg.concurrencies) for m in cfg.methods
             for k in ((0,) if m == "baseline" else ks)]
    extra = [k for k in dict.fromkeys(cfg.extra_ks) if k not in ks]
    cells += [Cell(w, m, k, c) for w in cfg.workloads for c in sorted(set(cfg.extra_ks_at)) for m in spec
              for k in extra]
    return cells


def _median(xs) -> float:
    xs = list(xs)
    return statistics.median(xs) if xs else 0.0


def cell_row(cell: Cell, results: list[GenerationResult], cfg: SweepConfig) -> BenchRow:
    """Aggregate the timed ``generate`` results of one cell (all its batches) into a row."""
    ms = [r.metrics for r in results]
    steps = [s for r in results for s in r.trace]
    drafted = [s for s in steps if s.drafter_forwards]  # the last step of a batch drafts nothing
    out = sum(m.output_tokens for m in ms)
    wall = sum(m.prefill_s + m.decode_s for m in ms)
    decode = sum(m.decode_s for m in ms)
    # decode tokens a row made: per request in a static batch of c, per row over a continuous call (c rows)
    per_request = sum(m.output_tokens - m.num_requests for m in ms) / cell.concurrency
    drafts, acc = sum(m.num_drafts for m in ms), sum(m.num_accepted_tokens for m in ms)
    pos = [sum(col) for col in zip(*(m.accepted_per_position for m in ms))] if cell.k else []
    num_steps = sum(m.num_steps for m in ms)
    return BenchRow(
        method=cell.method, k=cell.k, concurrency=cell.concurrency, workload=cell.workload,
        temperature=float(cfg.temperature), tps=out / wall if wall > 0 else 0.0,
        tpot_ms=1000.0 * decode / per_request if per_request > 0 else 0.0,
        acceptance_length=acceptance_length(acc, drafts),
        per_position_acceptance=per_position_acceptance(pos, drafts),
        num_drafts=drafts, num_accepted_tokens=acc,
        verify_ms=_median(s.verify_ms for s in steps),
        prep_ms=_median(s.prep_ms for s in drafted), draft_ms=_median(s.draft_ms for s in drafted),
        output_tokens=out, source="peagle_lab", num_prompts=sum(m.num_requests for m in ms),
        max_new_tokens=cfg.max_new_tokens, num_steps=num_steps,
        step_ms=1000.0 * decode / num_steps if num_steps else None,
        prefill_ms=1000.0 * sum(m.prefill_s for m in ms) / len(ms),
        extra={
            # the rows the steps ran, summed: under num_steps × c once compaction narrows a batch (rows_busy)
            **({"row_steps": sum(s.rows for s in steps)} if steps and all(s.rows for s in steps) else {}),
            # the contexts the steps attended to (tokens): mean_context over busy row-steps, longest_context the
            # steps' longest busy row (mean over steps); *_row_context over every row run (engine.context_summary)
            **{name: round(v, 1) for name, v in context_summary(steps).items()},
            # of prefill_ms, the first draft's share (device time a batch; a continuous call's admissions summed)
            **({"first_draft_ms": 1000.0 * sum(m.first_draft_s for m in ms) / len(ms)} if cell.k else {})})


def measure_cell(engine: SpecDecoder, cell: Cell, prompts: list[Prompt],
                 cfg: SweepConfig) -> tuple[BenchRow, list[list[int]]]:
    """Warm up, then time one cell; returns its row and the new tokens of every request."""
    c = cell.concurrency
    n = cfg.num_prompts(c)
    ids = [list(prompts[i % len(prompts)].token_ids) for i in range(n)]  # in turn: a workload may have fewer
    eos = () if cfg.ignore_eos else None
    # Continuous batching: the warm-up is the timed call itself, every request at full length, since each
    # admission is as wide as its group's longest prompt and the groups depend on when rows free: so the
    # timed call meets only admission widths whose graphs are captured. Static batches: every batch is warmed
    # (a short run), for every method: speculative methods capture a drafter graph per prefill length, and a
    # prompt shape's first eager prefill is slow for any method. Plain decoding once warmed only its first
    # batch, so at c = 1 its other prefills ran cold: 50-54 ms a request on the H200 against 22-25 ms for the
    # warmed speculative cells.
    continuous = cfg.batches_continuously(c)
    kw = {"eos_token_ids": eos, **({"concurrency": c} if continuous else {})}
    batches = [ids] if continuous else [ids[i: i + c] for i in range(0, len(ids), c)]
    warm_new = cfg.max_new_tokens if continuous else min(2 * cell.k + 4, cfg.max_new_tokens)
    for batch in batches:
        engine.generate(batch, max_new_tokens=warm_new, **kw)
    if not continuous:  # the narrower widths a batch compacts to, which a short warm-up rarely reaches
        engine.warm_widths(min(c, len(ids)))
    passes = [[engine.generate(b, max_new_tokens=cfg.max_new_tokens, **kw) for b in batches]
              for _ in range(cfg.repeats)]
    rows = [cell_row(cell, results, cfg) for results in passes]
    middle = sorted(range(len(rows)), key=lambda i: rows[i].tps)[(len(rows) - 1) // 2]  # the lower median
    row, results = rows[middle], passes[middle]
    if cfg.repeats > 1:
        row.extra["tps_runs"] = [round(r.tps, 1) for r in rows]
    # Compilation, warm-up and CUDA-graph capture of this cell's shapes (not in its timing);
    # compiled code is shared across cells, so the first cell of each shape family pays most.
    row.extra.update(warmup_s=round(engine.warmup_s, 3), compiled=engine.compiled,
                     **({"continuous": True} if continuous else {}))
    return row, [t for r in results for t in r.tokens]


def agreement(ours: list[list[int]], theirs: list[list[int]]) -> float:
    """Share of tokens generated before the first divergence, over all requests.

    >>> agreement([[1, 2, 3, 4]], [[1, 2, 9, 4]])
    0.5
    """
    same = total = 0
    for a, b in zip(ours, theirs):
        n = min(len(a), len(b))
        first = next((i for i in range(n) if a[i] != b[i]), n)
        same, total = same + first, total + max(len(a), len(b))
    return same / total if total else 0.0


def _free(device: torch.device, collect: bool = False) -> None:
    """Return cached device memory between cells (an engine holds no reference cycles, so
    dropping it frees its caches and graph pools; a full ``gc.collect`` costs ~0.1–0.5 s
    and runs only after an out-of-memory error)."""
    if collect:
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _label(cell: Cell) -> str:
    return f"{cell.workload} {cell.method}{f' K={cell.k}' if cell.k else ''} c={cell.concurrency}"


class _Progress:
    """A tqdm bar on a terminal; one log line per cell otherwise (logs of remote runs)."""

    def __init__(self, total: int, enabled: bool, log) -> None:
        from tqdm.auto import tqdm

        self.tty = enabled and sys.stderr.isatty()
        self.bar = tqdm(total=total, desc="bench", unit="cell", disable=not self.tty)
        self.enabled, self.log, self.done, self.total = enabled, log, 0, total

    def step(self, label: str, note: str) -> None:
        self.done += 1
        self.bar.update(1)
        self.bar.set_postfix_str(f"{label}: {note}")
        if self.enabled and not self.tty:
            self.log(f"[{self.done}/{self.total}] {label}: {note}")

    def close(self) -> None:
        self.bar.close()


def first_answers(target, prompts: list[list[int]], cfg: SweepConfig) -> list[list[int]]:
    """The target's own answers to ``prompts`` (MT-Bench's first turns): plain greedy decoding to EOS.

    One eager batch of them all, at most ``cfg.max_new_tokens`` each, EOS kept out: these answers become
    the history of the second turns, so every cell of a run decodes the same turn-2 requests.
    """
    spec = SpecConfig(method="baseline", max_new_tokens=cfg.max_new_tokens, cuda_graphs=False, compile="off",
                      prefill_graphs=False, first_draft_graphs=False)
    engine = SpecDecoder(target, None, spec)
    eos = set(target.config.eos_token_ids)
    tokens = engine.generate(prompts, max_new_tokens=cfg.max_new_tokens).tokens
    del engine
    _free(target.device)
    return [[t for t in ts if t not in eos] for ts in tokens]


def load_prompts(cfg: SweepConfig, tokenizer, max_positions: int, cells: list[Cell],
                 target=None) -> dict[str, list[Prompt]]:
    """The prompts every workload needs, sized for the largest cell (and the reference).

    MT-Bench's second turns need ``target``: its greedy first answers (``first_answers``) are their history.
    """
    ks = [c.k for c in cells] or [0]
    limit = max_positions - cfg.max_new_tokens - max(ks) - 1
    out = {}
    for w in cfg.workloads:
        cs = [c.concurrency for c in cells if c.workload == w]
        if cfg.reference and w in cfg.reference_workloads:
            cs += list(cfg.reference_concurrency)
        n = max(cfg.num_prompts(c) for c in cs or [1])
        if cfg.continuous and w in WORKLOAD_SIZES:
            n = min(n, WORKLOAD_SIZES[w])  # continuous cells take the prompts in turn
        answer = (lambda ids: first_answers(target, ids, cfg)) if target is not None else None
        out[w] = load_workload(w, n, cfg.seed, tokenizer, max_prompt_tokens=limit,
                               long_context_tokens=cfg.long_context_tokens, answer=answer)
    return out


def _reference(result: BenchResult, ref_cells, reference_folder, prompts, cfg: SweepConfig, target, skip, bar) -> dict:
    """transformers' compiled static-cache rows into ``result``; their tokens per (workload, c).

    A failure must not sink the sweep: its cells are recorded as skipped, with the reason.
    """
    from .reference import measure_reference

    ref_tokens: dict = {}
    try:
        rows, ref_tokens = measure_reference(reference_folder, {w: prompts[w] for w, _ in ref_cells},
                                             cfg, device=target.device, dtype=target.dtype)
    except Exception as e:  # noqa: BLE001 - say why the reference is missing, go on
        for w, c in ref_cells:
            skip(Cell(w, "baseline", 0, c), f"transformers reference failed: {type(e).__name__}: {e}", "transformers")
    else:
        for r in rows:
            result.rows.append(r)
            bar.step(f"{r.workload} transformers c={r.concurrency}", f"{r.tps:.1f} tok/s")
    _free(target.device)
    return ref_tokens


def _cell(target, drafters: dict, cell: Cell, prompts: list[Prompt], cfg: SweepConfig,
          t0: float) -> tuple[BenchRow | None, list, str]:
    """Measure one cell with a fresh engine: (row, tokens, "") or (None, [], why it was skipped).

    One engine per cell: its CUDA graphs are per shape (so per c) anyway, and dropping the
    engine frees the memory pools of the graphs it captured.
    """
    k, c = cell.k, cell.concurrency
    need = max(p.num_tokens for p in prompts[: cfg.num_prompts(c)]) + cfg.max_new_tokens + k + 1
    if cfg.max_batch_tokens and c * need > cfg.max_batch_tokens:
        return None, [], f"c*max_len = {c * need} > max_batch_tokens {cfg.max_batch_tokens}"
    if cfg.time_budget_s is not None and time.monotonic() - t0 > cfg.time_budget_s:
        return None, [], f"time budget of {cfg.time_budget_s:.0f} s used up"
    spec = SpecConfig(method=cell.method, num_speculative_tokens=max(k, 1), temperature=cfg.temperature,
                      max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, cuda_graphs=cfg.cuda_graphs,
                      prefill_graphs=cfg.prefill_graphs, first_draft_graphs=cfg.first_draft_graphs,
                      compile=cfg.compile, kernel_backend=cfg.kernel_backend, decode_attention=cfg.decode_attention,
                      refill_divisor=cfg.refill_divisor, compact_rows=cfg.compact_rows,
                      compile_edges=cfg.compile_edges)
    engine = SpecDecoder(target, drafters.get(cell.method), spec)
    try:
        # caches sized once: no timed pass regrows them (and drops graphs); continuous batching keeps a spare block
        engine.reserve(c + 1 if cfg.batches_continuously(c) else c, need)
        row, tokens = measure_cell(engine, cell, prompts, cfg)
        reason = ""
    except torch.OutOfMemoryError as e:
        row, tokens, reason = None, [], f"out of memory: {str(e).splitlines()[0][:160]}"
    del engine
    _free(target.device, collect=row is None)
    return row, tokens, reason


def run_sweep(target, tokenizer, drafters: dict, cfg: SweepConfig, *, run_info: dict, extra_config: dict | None = None,
              reference_folder=None, progress: bool = True, on_update=None, log=print,
              tokens_out: dict | None = None) -> BenchResult:
    """Measure every planned cell (and the transformers reference) and return the result.

    Args:
        target: the target ``LlamaModel`` (its device and dtype are used throughout).
        tokenizer: its tokenizer (chat template), or a ``HashTokenizer`` for tiny models.
        drafters: ``{"eagle3": Drafter, "peagle": Drafter}`` for the methods swept.
        run_info: ``peagle_lab.provenance.run_info(...)`` of this run.
        extra_config: more config to record (model, heads and where they came from, dtype).
        reference_folder: HF folder of the same weights for transformers; None skips it.
        on_update: called with the partial result after every cell (to save it as it grows).
        tokens_out: if given, filled with every measured cell's new tokens per request, under
            ``(workload, method, k, concurrency)`` (to compare with another engine's outputs).

    Raises:
        ValueError: a method without its drafter, or a workload that cannot be built.
    """
    missing = [m for m in cfg.methods if m != "baseline" and m not in drafters]
    if missing:
        raise ValueError(f"no drafter given for {', '.join(missing)}")
    t0 = time.monotonic()
    cells = plan_cells(cfg)
    prompts = load_prompts(cfg, tokenizer, target.config.max_position_embeddings, cells, target)
    config = {**asdict(cfg), **(extra_config or {}), "prompts": {
        w: {"num": len(ps), "min_tokens": min(p.num_tokens for p in ps), "max_tokens": max(p.num_tokens for p in ps),
            "mean_tokens": round(statistics.mean(p.num_tokens for p in ps), 1), "ids": [p.id for p in ps]}
        for w, ps in prompts.items()}}
    result = BenchResult(run_info, config)
    ref_cells = [(w, c) for w in cfg.workloads if w in cfg.reference_workloads for c in cfg.reference_concurrency] \
        if cfg.reference and reference_folder is not None else []
    bar = _Progress(len(cells) + len(ref_cells), progress, log)
    baseline_tokens: dict[tuple, list[list[int]]] = {}
    ref_tokens: dict[tuple, list[list[int]]] = {}

    def skip(cell: Cell, reason: str, source: str = "peagle_lab") -> None:
        result.skipped.append(SkippedCell(cell.workload, cell.method, cell.k, cell.concurrency,
                                          float(cfg.temperature), reason, source))
        bar.step(_label(cell), f"skipped ({reason})")

    if ref_cells:
        ref_tokens = _reference(result, ref_cells, reference_folder, prompts, cfg, target, skip, bar)

    for cell in cells:
        t_cell = time.monotonic()
        row, tokens, reason = _cell(target, drafters, cell, prompts[cell.workload], cfg, t0)
        if row is None:
            skip(cell, reason)
            continue
        result.rows.append(row)
        if tokens_out is not None:
            tokens_out[(cell.workload, cell.method, cell.k, cell.concurrency)] = tokens
        if cell.method == "baseline":
            baseline_tokens[(cell.workload, cell.concurrency)] = tokens
        first = row.extra.get("first_draft_ms")
        prefill = f"prefill {row.prefill_ms:.1f} ms" + (f" (first draft {first:.1f})" if first is not None else "")
        bar.step(_label(cell), f"{row.tps:.1f} tok/s, AL {row.acceptance_length:.2f}, {prefill}, "
                               f"{time.monotonic() - t_cell:.1f} s")
        if on_update:
            on_update(result)

    if cfg.temperature == 0:
        for r in result.rows:
            key = (r.workload, r.concurrency)
            if r.source == "transformers" and key in baseline_tokens and key in ref_tokens:
                r.agreement = agreement(baseline_tokens[key], ref_tokens[key])
    bar.close()
    result.config["wall_s"] = round(time.monotonic() - t0, 1)
    result.config["warmup_s"] = round(sum(r.extra.get("warmup_s", 0.0) for r in result.rows), 1)
    if on_update:
        on_update(result)
    return result

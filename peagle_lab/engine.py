"""``SpecDecoder``: a batched, lossless speculative-decoding loop (baseline / EAGLE-3 / P-EAGLE).

One decode step for c requests (all rows padded to the same width, vLLM-style):

```
state on the device: next token [c], drafts [c, K], start positions [c], active [c]
 ─► verify part: target([c, K+1]) ─► verify ─► accepted n [c], next token [c], new state
        │  (CUDA, temperature 0: one graph)        └─► tokens + n copied to pinned host memory
 ─► drafter (P-EAGLE: 1 pass, EAGLE-3: K passes) ─► drafts [c, K]   (two graphs: prep, passes)
 host: waits for that copy only, appends the accepted tokens, flags finished requests
```
The host reads one small tensor a step, and reads it while the drafter runs, so on a GPU the
next step's graph is queued before the current one ends and no kernel waits for Python.
Plain decoding (``method="baseline"``) is the same loop with K = 0, so all three methods
share the target code path, the KV-cache layout and the CUDA-graph treatment. With no drafter
to hide the host's read behind, plain decoding queues step n + 1 before it reads step n (the
next token never leaves the device); a request that finished at step n is decoded once more
and that output ignored. Waiting for each step's tokens instead would leave the GPU idle for
the host's bookkeeping every step (docs/engine.md).

Request ``b`` owns KV slots ``[b*max_len, (b+1)*max_len)`` in the target's and the drafter's
cache; positions past a request's accepted length are simply overwritten by the next step,
so the KV of rejected tokens is never read.

The step itself is :mod:`peagle_lab.step` (plain functions); this module adds what a serving
loop needs around it: KV caches kept across calls (``reserve``), CUDA graphs of the verify part
and the drafter, timing without host syncs, and vLLM's counters.

``generate(prompts, concurrency=c)`` with more prompts than ``c`` batches continuously: a
request that finishes frees its row, and once about ``c / refill_divisor`` rows are free (``SpecConfig``,
default 4; or once none is busy)
the next prompts are prefilled, and their first drafts made, in a scratch cache whose blocks
are then copied into the free rows' blocks; the other rows keep their state. A static batch
runs until its slowest request is done, so a speculative batch keeps only part of its row-steps
busy (``bench.analysis.rows_busy`` measures the share; docs/engine.md).
"""
from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from . import step
from .acceptance import acceptance_length, per_position_acceptance
from .config import SpecConfig, check_int
from .drafter import Drafter, check_drafter_fits
from .drafting import DraftResult, run_drafter
from .kernels.backend import resolve as resolve_backend
from .models.llama import LlamaModel, call_layer, forward_epilogue, forward_prologue, fuse_projections


@dataclass(frozen=True)
class StepTrace:
    """What one decode step did and how long its parts took (milliseconds)."""

    step: int
    verify_ms: float
    prep_ms: float  # draft-batch construction (prepare_draft_inputs + fill_draft_hidden + fc)
    draft_ms: float  # drafter passes and sampling
    num_accepted: tuple[int, ...]  # per active request
    drafter_forwards: int
    rows: int | None = None  # the batch rows the step ran (fewer than c once a static batch compacts)


@dataclass(frozen=True)
class Metrics:
    """vLLM's spec-decode counters and derived rates for one ``generate`` call."""

    method: str
    k: int
    num_requests: int
    num_steps: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: tuple[int, ...]
    output_tokens: int
    prefill_s: float  # prompts' prefills, each request's first draft included
    decode_s: float
    first_draft_s: float = 0.0  # of prefill_s, the first drafts' share (device time; 0 for plain decoding)

    @property
    def acceptance_length(self) -> float:
        """AL = 1 + accepted / drafts (counts the bonus token); 1.0 for plain decoding."""
        return acceptance_length(self.num_accepted_tokens, self.num_drafts)

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        return tuple(per_position_acceptance(self.accepted_per_position, self.num_drafts))

    @property
    def tps(self) -> float:
        """Output tokens per second over all requests (prefill included)."""
        total = self.prefill_s + self.decode_s
        return self.output_tokens / total if total > 0 else 0.0

    @property
    def tpot_ms(self) -> float:
        """Decode time per output token of one request (the first token excluded)."""
        per_req = self.output_tokens / max(self.num_requests, 1) - 1
        return 1000.0 * self.decode_s / per_req if per_req > 0 else 0.0

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["accepted_per_position"] = list(self.accepted_per_position)
        for k in ("acceptance_length", "acceptance_rate", "tps", "tpot_ms"):
            d[k] = getattr(self, k)
        d["per_position_acceptance"] = list(self.per_position_acceptance)
        return d


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # new tokens per request (EOS included when it stopped there)
    metrics: Metrics
    trace: list[StepTrace] = field(default_factory=list)


class Timer:
    """Wall-clock sections; on CUDA, events so that timing adds no host synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())
        return len(self.marks) - 1

    def ms(self, a: int, b: int) -> float:
        if self.cuda:
            return self.marks[a].elapsed_time(self.marks[b])
        return 1000.0 * (self.marks[b] - self.marks[a])


def capture_graph(fn, pool=None):
    """Warm ``fn`` up on a side stream, then capture it; returns (graph, its static output).

    ``pool`` (``torch.cuda.graph_pool_handle()``) lets graphs that never run at the same time share memory.
    """
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # allocator and lazy initialisation happen outside the graph
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        out = fn()
    return g, out


KV_BLOCK_ALIGN = 64  # positions; see SpecDecoder._caches
PREFILL_ALIGN = 64  # padded prefill widths are a multiple of this (SpecDecoder._prefill, StreamDecoder)
PREFILL_GRAPH_TOKENS = 16384  # SpecConfig.prefill_graphs: c × padded width at most; longer prefills stay eager


def padded_prefill_width(width: int, max_len: int) -> int:
    """``width`` rounded up to a multiple of ``PREFILL_ALIGN``, at most ``max_len``: a graphed prefill's shape.

    >>> padded_prefill_width(9, 256), padded_prefill_width(64, 256), padded_prefill_width(250, 256)
    (64, 64, 256)
    """
    return min(-(-width // PREFILL_ALIGN) * PREFILL_ALIGN, max_len)


COMBO_KERNELS = True  # inductor's combo_kernels in compiled(); read at the first compile of a process


@functools.cache
def compiled(fn):
    """``fn`` under ``torch.compile`` with symbolic sizes, once per process for every engine.

    The engine compiles :func:`~peagle_lab.models.llama.call_layer`: one decoder layer, so
    every layer of the target and the drafter shares the compiled code. Sizes are symbolic
    (``dynamic=True``), so one compilation serves every c, T and cache size; dynamo still
    specialises sizes 0 and 1, so each layer kind compiles about four times (c = 1 or more,
    T = 1 or more), each reused by every later engine and shape.

    Inductor's ``combo_kernels`` launches independent small kernels of a layer as one (on the
    H200 the q and k rope and the K/V cache writes): a SmolLM2 plain decode step at c = 1 went
    from 1.096 to 1.026 ms with it, a P-EAGLE K = 7 step from 1.346 to 1.278 ms
    (``docs/results/h200/verify_profile/combo_kernels.json``). The CPU tests compile with it on
    (inductor's C++ backend), and the outputs stay exact. ``COMBO_KERNELS = False`` before the
    first engine turns it off (``scripts/gpu/verify_profile_gpu.py --no-combo-kernels``).
    """
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):  # the 0/1 specialisations of c, T, rows
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
    return torch.compile(fn, fullgraph=True, dynamic=True, options={"combo_kernels": COMBO_KERNELS})


class CompiledForward:
    """The engine's ``layer_fn``: each decoder layer compiled (:func:`compiled` of ``call_layer``), and
    with ``edges`` the work around the layers too.

    ``LlamaModel.forward`` and ``Drafter.forward`` call it for every layer, and take its
    ``prologue`` and ``epilogue`` when they are not None: the attention mask, KV slots, ``kv_len``,
    rope and embeddings before the first layer (``models.llama.forward_prologue``, for calls that
    read the cache through a mask: decode steps and later prefill chunks), and the last residual
    add, final norm, row pick and lm_head after the last (``forward_epilogue``). Eagerly those are
    some twenty-five small kernels a forward, which a CUDA graph replays one by one; compiled they
    are a few (``SpecConfig.compile_edges``). EAGLE-3 runs them once per drafter pass, P-EAGLE once a step.
    """

    def __init__(self, edges: bool) -> None:
        self.layer = compiled(call_layer)
        self.prologue = compiled(forward_prologue) if edges else None
        self.epilogue = compiled(forward_epilogue) if edges else None

    def __call__(self, layer, *args):
        return self.layer(layer, *args)


@functools.cache
def compiled_forward(edges: bool) -> CompiledForward:
    """The :class:`CompiledForward` of every engine in this process (its compiled code is shared)."""
    return CompiledForward(edges)


def decode_attention_fn(choice: str, device: torch.device):
    """The decode steps' attention for ``SpecConfig.decode_attention``: a kernel function, or None (SDPA).

    "auto" on CUDA takes the split-KV kernel for T > 1 query tokens a request, and for T = 1 while the
    batch leaves it SMs to split the keys over; SDPA for T = 1 above that
    (``kernels.decode_attention.multi_query_attention``, bound to this GPU's SM count: the faster of
    the two at each, on the H200); elsewhere SDPA. "triton" takes the kernel for every decode shape (on
    a CPU in Triton's interpreter, for tests; ValueError where that cannot run). "sdpa": SDPA throughout.
    """
    if choice == "sdpa" or (choice == "auto" and device.type != "cuda"):
        return None
    if resolve_backend("auto" if choice == "auto" else "triton", device) != "triton":
        return None  # "auto" on CUDA without the triton package
    from .kernels import decode_attention as kernels

    if choice == "triton":
        return torch.ops.peagle_lab.decode_attention.default
    return functools.partial(kernels.multi_query_attention, programs=kernels.programs_wanted(device))


class CudaGraphs:
    """CUDA graphs captured per key (an input shape); ``run`` copies inputs into static buffers.

    ``warmup_s`` adds up the wall time of first calls (compilation, warm-up and capture). ``pool``
    (``torch.cuda.graph_pool_handle()``) gives every graph that ``run`` captures one shared memory
    pool: safe for graphs that run one at a time on one stream, whose static inputs and outputs
    stay allocated.
    """

    def __init__(self, pool=None) -> None:
        self.graphs: dict = {}
        self.warmup_s = 0.0
        self.pool = pool

    def capture(self, key, make):
        """``self.graphs[key] = make()`` once, timed into ``warmup_s``."""
        if key not in self.graphs:
            t0 = time.perf_counter()
            self.graphs[key] = make()
            torch.cuda.synchronize()
            self.warmup_s += time.perf_counter() - t0
        return self.graphs[key]

    def run(self, key, fn, *args: torch.Tensor):
        def make():
            static = [a.clone() for a in args]
            g, out = capture_graph(lambda: fn(*static), pool=self.pool)
            return g, static, out
        g, static, out = self.capture(key, make)
        for s_, a in zip(static, args):
            s_.copy_(a)
        g.replay()
        return out


class SpecDecoder:
    """Batched speculative decoding of ``target`` with an optional ``drafter``.

    Args:
        target: the target model (its dtype/device are used throughout).
        drafter: an EAGLE-3 or P-EAGLE ``Drafter`` for ``config.method``; None for baseline.
        config: ``SpecConfig`` (method, K, temperature, max_new_tokens, seed, backends).

    Raises:
        ValueError: a target or drafter of the wrong type, a drafter that does not fit the
            method or the target, a config that is not a ``SpecConfig``.
    """

    def __init__(self, target: LlamaModel, drafter: Drafter | None = None, config: SpecConfig = SpecConfig()) -> None:
        if not isinstance(config, SpecConfig):
            raise ValueError(f"config must be a SpecConfig, got {type(config).__name__}")
        if not isinstance(target, LlamaModel):
            raise ValueError(f"target must be a LlamaModel (peagle_lab.load_model), got {type(target).__name__}")
        if drafter is not None and not isinstance(drafter, Drafter):
            raise ValueError(f"drafter must be a Drafter (peagle_lab.heads.io.load_head) or None, "
                             f"got {type(drafter).__name__}")
        self.target, self.drafter, self.config = target, drafter, config
        if config.method != "baseline":
            if drafter is None:
                raise ValueError(f"method={config.method!r} needs a drafter; pass one or use method='baseline'")
            check_drafter_fits(drafter, target, config.method)
        self.device = target.device
        # q/k/v and gate/up as one matrix product each: fewer kernels per decode step.
        fuse_projections(target)
        if drafter is not None:
            fuse_projections(drafter)
        self.use_graphs = config.cuda_graphs and self.device.type == "cuda"
        self.compiled = config.compile == "on" or (config.compile == "auto" and self.device.type == "cuda")
        # Decode steps run each decoder layer compiled, and so does the prefill while
        # ``compile_prefill`` is True (the default with compile): its first chunk attends through
        # SDPA's causal kernel, so what a compiled layer fuses is the norms, rope and MLP
        # elementwise work (on the H200, random SmolLM2 weights: ``scripts/gpu/prefill_batch_gpu.py``).
        self._layer_fn = compiled_forward(config.compile_edges) if self.compiled else None
        self.compile_prefill = self.compiled
        self.decode_attention = decode_attention_fn(config.decode_attention, self.device)
        self._graphs = CudaGraphs()
        self._prefill_graphs = CudaGraphs()  # SpecConfig.prefill_graphs: one per padded prompt shape
        self._cache_t = self._cache_d = None
        # How many times the KV caches were allocated: a soak test's proof that they are reused
        # (a freed and reallocated cache can land at the same address, so pointers cannot tell).
        self.cache_allocations = 0
        # Called with every DraftResult the engine proposes (the vLLM check records drafts with it).
        self.on_draft: Callable[[DraftResult], None] | None = None
        self._scratch_caches = None  # (target, drafter) caches that continuous batching admits through

    def reserve(self, concurrency: int, max_len: int) -> None:
        """Size the KV caches for ``concurrency`` requests of up to ``max_len`` tokens now.

        The caches grow on demand, and growing them drops the captured CUDA graphs; a
        benchmark reserves its largest cell once so that no timed pass pays for that.
        """
        self._caches(concurrency, max_len)

    @property
    def warmup_s(self) -> float:
        """Seconds spent compiling, warming up and capturing CUDA graphs so far (0 without graphs)."""
        return self._graphs.warmup_s + self._prefill_graphs.warmup_s

    def cache_tensors(self) -> list[torch.Tensor]:
        """Every K/V tensor of the target's and the drafter's caches (none before the first use)."""
        return [t for cache in (self._cache_t, self._cache_d) if cache is not None for t in (*cache.k, *cache.v)]

    def _caches(self, c: int, max_len: int):
        """KV caches reused across ``generate`` calls (so captured graphs stay valid).

        A request's block is rounded up to a multiple of ``KV_BLOCK_ALIGN`` positions: the
        decode step attends over the whole block, and in the H200 sweep of 2026-12-01 cells
        whose block length was unaligned had verify steps up to 45 % slower than their
        neighbours (attention kernels want aligned key lengths), so timings jumped with K.
        """
        max_len = -(-max_len // KV_BLOCK_ALIGN) * KV_BLOCK_ALIGN
        cur = self._cache_t
        if cur is None or c > cur.max_batch or max_len > cur.max_len:
            self._graphs.graphs.clear()  # they point at the old caches
            self._prefill_graphs.graphs.clear()
            self._prefill_graphs.pool = None  # a fresh pool with the new caches (as StreamDecoder does)
            self._cache_t = self._cache_d = None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self._cache_t = self.target.allocate_cache(c, max_len)
            self._cache_t.decode_attention = self.decode_attention
            self.cache_allocations += 1
            if self.config.k:
                self._cache_d = self.drafter.allocate_cache(c, max_len)
                self._cache_d.decode_attention = self.decode_attention
        return self._cache_t, self._cache_d

    # ------------------------------------------------------------------ forwards
    def _target(self, ids, pos, slots, cache):
        def fn(ids, pos, slots):
            return step.target_step(self.target, cache, ids, pos, slots, taps=self.config.k > 0,
                                    layer_fn=self._layer_fn)
        if self.use_graphs:
            return self._graphs.run(("target", tuple(ids.shape)), fn, ids, pos, slots)
        return fn(ids, pos, slots)

    def _verify(self, st: "_State", cache, max_len: int, gen) -> "_Verified":
        """The target over the bonus token and the drafts, then verification: one graph on CUDA.

        At temperature 0 the whole part (the verify batch, the target, greedy verification and
        the next state) replays as one CUDA graph whose inputs are the state's four tensors, so
        the host launches one graph a step instead of a dozen small kernels; with sampling the
        target alone is graphed (the verifier draws from a generator).
        """
        cfg = self.config

        def part(nxt, start, active, *drafts):
            d = drafts[0] if drafts else None
            vids, vpos, vslots = step.verify_inputs(nxt, d, start, max_len, active)
            logits, taps = step.target_step(self.target, cache, vids, vpos, vslots, taps=cfg.k > 0,
                                            layer_fn=self._layer_fn)
            pending = None if d is None else DraftResult(d, None, 0, None)
            return _verified(logits, taps, vids, vpos, pending, start, active, 0.0, None, cfg.kernel_backend)

        if self.use_graphs and cfg.temperature == 0:
            args = (st.nxt, st.start, st.active) + (() if st.draft is None else (st.draft.tokens,))
            return self._graphs.run(("verify", tuple(args[-1].shape), max_len), part, *args)
        vids, vpos, vslots = step.verify_inputs(st.nxt, None if st.draft is None else st.draft.tokens, st.start,
                                                max_len, st.active)
        logits, taps = self._target(vids, vpos, vslots, cache)
        return _verified(logits, taps, vids, vpos, st.draft, st.start, st.active, cfg.temperature, gen,
                         cfg.kernel_backend)

    def _prefill(self, ids: torch.Tensor, pos: torch.Tensor, lens: torch.Tensor, cache, max_len: int,
                 taps: bool, tag: str = "batch") -> tuple[step.TargetOutput, torch.Tensor, torch.Tensor, bool]:
        """The target over the padded prompts (``step.prefill``); with ``prefill_graphs``, at a padded shape.

        The width is padded to a multiple of ``PREFILL_ALIGN`` (the padding writes no KV and
        no query reads it), so a handful of shapes covers every prompt length, and on CUDA each
        replays as one graph instead of launching every layer's kernels from Python: an eager
        prefill costs about the same 20 ms at c = 1 and at c = 64 on the H200, so its launches,
        not its arithmetic, set its time. Prefills over ``PREFILL_GRAPH_TOKENS`` tokens are
        compute-bound and stay eager (each graph keeps its taps, c × width × 3H, allocated).

        ``tag`` names the cache in the graph's key ("batch": the main one, "admit": the scratch cache
        of continuous batching), since a captured graph writes to the cache it was captured with.

        Returns the output with the ids and positions the first draft reads, and whether that
        draft may replay as a graph: with ``first_draft_graphs`` and a padded prefill, all at the
        padded width (the padding slots lie past every request's prompt, where a ragged batch's
        shorter rows already end) and True; else at the prompts' own width and False.
        """
        c, T = ids.shape
        layer_fn = self._layer_fn if self.compile_prefill else None
        tb = padded_prefill_width(T, max_len)
        padded = self.use_graphs if self.config.prefill_graphs == "auto" else self.config.prefill_graphs
        if not padded or c * tb > min(PREFILL_GRAPH_TOKENS, step.PREFILL_CHUNK_TOKENS):
            return step.prefill(self.target, ids, pos, lens, cache, max_len, taps=taps,
                                layer_fn=layer_fn), ids, pos, False
        ids = torch.nn.functional.pad(ids, (0, tb - T))

        def fn(ids, lens):  # positions made inside, so a captured graph owns them
            pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
            out = step.prefill(self.target, ids, pos, lens, cache, max_len, taps=taps, layer_fn=layer_fn)
            return out.logits, out.taps  # the graph keeps what it returns: not the hidden states

        if self.use_graphs:
            if self._prefill_graphs.pool is None:
                self._prefill_graphs.pool = torch.cuda.graph_pool_handle()  # one pool for every shape
            logits, tap = self._prefill_graphs.run(("prefill", tag, c, tb, max_len, taps), fn, ids, lens)
        else:
            logits, tap = fn(ids, lens)
        if self.config.first_draft_graphs:
            return step.TargetOutput(logits, tap, None), ids, torch.arange(tb, device=ids.device).expand(c, tb), True
        return step.TargetOutput(logits, tap[:, :T] if taps else None, None), ids[:, :T], pos, False

    def _drafter_forward(self, cache, ids, hidden, pos, slots, rows, tag: str = "batch", fresh: bool = False):
        """A decode-shaped drafter pass (a CUDA graph per shape on CUDA). It reads the cache, so ``fresh``,
        which only lets a first draft skip reading it, is taken and not used: the result is the same."""
        if not self.use_graphs:
            return run_drafter(self.drafter, cache, ids, hidden, pos, slots, rows, self._layer_fn)

        def fn(ids, hidden, pos, slots, *rows):
            return run_drafter(self.drafter, cache, ids, hidden, pos, slots, rows[0] if rows else None, self._layer_fn)
        extra = (rows,) if rows is not None else ()
        key = ("drafter", tag, tuple(ids.shape), None if rows is None else tuple(rows.shape))
        return self._graphs.run(key, fn, ids, hidden, pos, slots, *extra)

    def _first_draft_forward(self, tag: str):
        """The drafter's forward for a first draft that is not one graph (a prefill over the graph cap).

        Its first pass spans the prompts and runs each layer compiled, as the prefill does
        (``compile_prefill``); EAGLE-3's later passes, one token a row, replay a graph each on
        CUDA, as a decode step's do. Until 2026-12-03 all of them ran eagerly, so at c = 64 on the
        code prompts EAGLE-3's first draft took K eager passes after every batch prefill.
        """
        layer_fn = self._layer_fn if self.compile_prefill else None

        def forward(cache, ids, hidden, pos, slots, rows, fresh: bool = False):
            if self.use_graphs and ids.shape[1] == 1 and rows is None:  # EAGLE-3's later passes
                return self._drafter_forward(cache, ids, hidden, pos, slots, None, tag)
            return run_drafter(self.drafter, cache, ids, hidden, pos, slots, rows, layer_fn, fresh=fresh)
        return forward

    def _draft(self, cache, taps, ids, pos, n, bonus, max_len, gen, timer: "Timer | None" = None,
               graph_first: bool = False, tag: str = "batch", first: bool = False):
        """``step.prepare_draft`` (timed as "prep") then ``step.draft``; returns (result, marks).

        On CUDA at temperature 0, decode steps replay two graphs (prep, then every drafter
        pass with its argmax), so both methods pay no per-kernel launch cost. A first draft after a
        padded prefill is graphed the same way (``graph_first``); one after a prefill over the graph
        cap runs its first pass with compiled layers and EAGLE-3's later passes as graphs
        (``_first_draft_forward``). ``first``: a first draft, after a prefill into cache blocks that
        hold nothing older, so its first pass attends causally over its own keys
        (``Drafter.forward(fresh=True)``) rather than over the whole block through a mask.
        """
        cfg = self.config

        def prep(taps, ids, pos, n, bonus):
            return step.prepare_draft(self.drafter, taps, ids, pos, n, bonus, cfg.k, max_len, cfg.kernel_backend)

        def draft(batch, forward):  # a first draft follows a prefill into empty blocks: its first pass is fresh
            return step.draft(self.drafter, cache, taps, ids, pos, n, bonus, k=cfg.k, max_len=max_len,
                              temperature=cfg.temperature, generator=gen, backend=cfg.kernel_backend, batch=batch,
                              forward=forward, fresh=first)

        decode = ids.shape[1] == cfg.k + 1  # decode-step shapes are worth a graph, and a padded first draft
        if self.use_graphs and cfg.temperature == 0 and (decode or graph_first):
            key = ("first-draft" if first else "draft", tag, tuple(ids.shape))
            res, marks = self._graphed_draft(prep, draft, (taps, ids, pos, n, bonus), timer, key)
        else:
            m0 = timer.mark() if timer else None
            batch = prep(taps, ids, pos, n, bonus)
            m1 = timer.mark() if timer else None
            res = draft(batch, self._drafter_forward if decode and not first else self._first_draft_forward(tag))
            marks = (m0, m1, timer.mark() if timer else None)
        if self.on_draft is not None:
            self.on_draft(res)
        return res, marks

    def _graphed_draft(self, prep, draft, args, timer, key):
        def make():
            static = [a.clone() for a in args]
            g_prep, batch = capture_graph(lambda: prep(*static))
            g_prep.replay()  # captured outputs hold nothing until a replay; the draft warm-up reads them
            plain = lambda cache, *a, **kw: run_drafter(  # noqa: E731
                self.drafter, cache, *a, layer_fn=self._layer_fn, **kw)
            g_draft, res = capture_graph(lambda: draft(batch, plain))
            return g_prep, g_draft, static, res

        g_prep, g_draft, static, res = self._graphs.capture(key, make)
        for s_, a in zip(static, args):
            s_.copy_(a)
        m0 = timer.mark() if timer else None
        g_prep.replay()
        m1 = timer.mark() if timer else None
        g_draft.replay()
        m2 = timer.mark() if timer else None
        return res, (m0, m1, m2)

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new_tokens: int | None = None,
                 eos_token_ids: tuple[int, ...] | None = None, *, concurrency: int | None = None) -> GenerationResult:
        """Decode every prompt (token ids) until EOS or ``max_new_tokens``.

        ``concurrency``: decode at most this many requests at a time, with continuous batching (a
        finished request's row takes the next prompt); None decodes all prompts as one batch.

        Returns:
            GenerationResult with the new tokens per request, the metrics and a step trace.

        Raises:
            ValueError: empty batch or prompt, ids that are not ints or lie outside the vocabulary,
                a prompt too long for the context, bad ``max_new_tokens``, ``eos_token_ids`` or
                ``concurrency``.
        """
        if concurrency is not None:
            check_int("concurrency", concurrency, 1, 1 << 16)
            if isinstance(prompts, (list, tuple)) and concurrency < len(prompts):
                return self._generate_continuous(prompts, max_new_tokens, eos_token_ids, concurrency)
        cfg, K = self.config, self.config.k
        max_new, eos, need = self._check_request(prompts, max_new_tokens, eos_token_ids)
        c, dev = len(prompts), self.device
        gen = torch.Generator(device=dev).manual_seed(cfg.seed)
        cache_t, cache_d = self._caches(c, need)
        max_len = cache_t.max_len  # request b owns slots [b*max_len, (b+1)*max_len)

        counts, trace, timer = _Counts(K), [], Timer(dev)
        t0 = time.perf_counter()
        ids, pos, lens = step.pad_prompts(prompts, dev)
        out, ids, pos, graph_first = self._prefill(ids, pos, lens, cache_t, max_len, K > 0)
        nxt = step.sample(out.logits[:, 0], cfg.temperature, gen)
        draft, first_marks = self._draft(cache_d, out.taps, ids, pos, lens - 1, nxt, max_len, gen, timer,
                                         graph_first=graph_first, first=True) if K else (None, None)
        outputs = [[t] for t in nxt.tolist()]  # by row: compaction reorders the rows, not these lists
        by_request, longest = list(outputs), max(map(len, prompts))
        done = [step.finished(o, eos, max_new) for o in outputs]
        # start: the position of each request's newest token (not yet processed by the target)
        st = _State(nxt, draft, lens.clone(), _device_flags([not d for d in done], dev))
        prefill_s = time.perf_counter() - t0  # nxt.tolist() waited for the first draft, queued before it
        first_draft_s = timer.ms(first_marks[0], first_marks[2]) / 1e3 if K else 0.0

        t1 = time.perf_counter()
        launched = self._launch(st, cache_t, cache_d, max_len, gen, timer) if not all(done) else None
        while not all(done):
            v, draft, rows, marks = launched
            # Plain decoding queues step n + 1 before it reads step n (see _may_continue): no drafter runs
            # while the host reads, so the GPU would otherwise idle through every read and launch.
            ahead = None
            if K == 0 and _may_continue(outputs, done, max_new):
                ahead = _State(v.next_tokens, None, v.start, st.active)
                launched = self._launch(ahead, cache_t, cache_d, max_len, gen, timer)
            packed = rows.wait()
            was_done = list(done)
            accepted_now = step.accept(outputs, done, [r[:-1] for r in packed], [r[-1] for r in packed], eos, max_new)
            if K:
                counts.add(accepted_now)
            active = st.active if done == was_done else _device_flags([not d for d in done], dev)
            trace.append((len(trace), *marks, tuple(accepted_now), draft.num_forwards if K else 0, len(done)))
            if ahead is not None:  # step n + 1 is queued; step n + 2 starts from its outputs
                nv = launched[0]
                st = _State(nv.next_tokens, None, nv.start, active)
            else:
                st = _State(v.next_tokens, draft, v.start, active)
                if not all(done):
                    st, outputs, done = self._compact(st, outputs, done, longest, cache_t, cache_d)
                launched = self._launch(st, cache_t, cache_d, max_len, gen, timer) if not all(done) else None
        if dev.type == "cuda":
            torch.cuda.synchronize()
        decode_s = time.perf_counter() - t1
        outs = [step.trim(o, eos, max_new) for o in by_request]
        metrics = counts.metrics(cfg.method, c, len(trace), sum(len(o) for o in outs), prefill_s, decode_s,
                                 first_draft_s)
        return GenerationResult(outs, metrics, [_step_trace(timer, *t) for t in trace])

    def _compact(self, st: "_State", outputs: list[list[int]], done: list[bool], longest: int, *caches):
        """Fewer rows once most of a static batch is done (``SpecConfig.compact_rows``): (state, outputs, done).

        When the requests still decoding fit in half the rows, the next power of two of rows (those
        requests, padded with finished ones) move to the front of the KV caches, a block every
        layer's in one copy, and the state follows them; later steps run at that width, as a vLLM batch
        loses its finished requests. Without it a batch decodes every row until its slowest request
        is done. A row's result does not depend on the others, so the output is the same.
        ``longest``: the longest prompt. Each block moves up to past every position its row has
        written (a step writes its own positions before it attends to them: later ones need no copy).
        """
        width, live = len(done), [b for b, d in enumerate(done) if not d]
        w = 1 << (len(live) - 1).bit_length()  # the next power of two: a few widths, one graph set each
        if not self.config.compact_rows or w > width // 2:
            return st, outputs, done
        order = sorted(live + [b for b, d in enumerate(done) if d][: w - len(live)])
        written = longest + max(map(len, outputs)) + 2 * self.config.k + 2
        idx = torch.tensor(order, device=self.device)
        for cache in caches:
            if cache is not None:
                move_kv_blocks(cache, order, written)
        draft = st.draft
        if draft is not None:
            probs = None if draft.draft_probs is None else draft.draft_probs[idx]
            draft = DraftResult(draft.tokens[idx], probs, draft.num_forwards, draft.inputs)
        return (_State(st.nxt[idx], draft, st.start[idx], st.active[idx]), [outputs[b] for b in order],
                [done[b] for b in order])

    def warm_widths(self, concurrency: int) -> list[int]:
        """Capture the decode step at every width a static batch of ``concurrency`` compacts to.

        Call it after a warm-up ``generate`` (which compiled the step and sized the caches that
        the timed calls reuse) and before a timed one: a short warm-up run rarely meets the narrow
        widths a long one ends in, and a graph captured mid-run would be timed. Each width runs
        one step with every row idle: no row writes the target's cache, and the drafter writes
        only positions that a request's own prefill or steps write before reading. On a CPU, or
        with ``compact_rows`` or CUDA graphs off, it does nothing. Returns the widths warmed.

        Raises:
            ValueError: ``concurrency`` is not an int, or exceeds the caches' rows (or none exist yet).
        """
        rows = 0 if self._cache_t is None else self._cache_t.max_batch
        if not rows:
            raise ValueError("warm_widths needs the KV caches: call reserve() or generate() first")
        check_int("concurrency", concurrency, 1, rows)
        if not (self.use_graphs and self.config.compact_rows):
            return []
        cache_t, cache_d = self._cache_t, self._cache_d
        # _compact's widths: the powers of two up to half the batch
        widths = [1 << i for i in reversed(range((concurrency // 2).bit_length()))]
        with torch.inference_mode():
            for w in widths:
                self._step(_State.idle(w, self.config.k, self.device), cache_t, cache_d, cache_t.max_len,
                           torch.Generator(device=self.device), Timer(self.device))
        return widths

    def _launch(self, st: "_State", cache_t, cache_d, max_len: int, gen, timer: "Timer"):
        """Queue one decode step of every row: (verified, the next drafts, a ``_Readback`` of the new tokens, marks).

        The accepted tokens travel to the host while the drafter runs; the drafter drafts for every
        row, since waiting to learn which requests finished would idle the GPU. ``rows.wait()``
        gives the packed rows: [c][K+2], the new tokens (-1 padded), then the accepted count.
        """
        m0 = timer.mark()
        v = self._verify(st, cache_t, max_len, gen)
        m1 = timer.mark()
        rows = _Readback(v.packed)
        draft, marks = None, None
        if self.config.k:
            draft, marks = self._draft(cache_d, v.taps, v.ids, v.positions, v.num_accepted, v.next_tokens,
                                       max_len, gen, timer)
        return v, draft, rows, (m0, m1, marks)

    def _step(self, st: "_State", cache_t, cache_d, max_len: int, gen, timer: "Timer"):
        """One decode step, waited for: as ``_launch`` with the packed rows read."""
        v, draft, rows, marks = self._launch(st, cache_t, cache_d, max_len, gen, timer)
        return v, draft, rows.wait(), marks

    # ------------------------------------------------------------------ continuous batching
    def _scratch(self, rows: int, max_len: int):
        """The target's and the drafter's scratch caches for admissions (``rows`` blocks of ``max_len``)."""
        cur = self._scratch_caches
        if cur is None or cur[0].max_batch != rows or cur[0].max_len != max_len:
            for key in [k for k in (*self._graphs.graphs, *self._prefill_graphs.graphs) if "admit" in k]:
                self._graphs.graphs.pop(key, None)  # they write to the old scratch caches
                self._prefill_graphs.graphs.pop(key, None)
            t = self.target.allocate_cache(rows, max_len)
            t.decode_attention = self.decode_attention
            d = None
            if self.config.k:
                d = self.drafter.allocate_cache(rows, max_len)
                d.decode_attention = self.decode_attention
            self._scratch_caches = (t, d)
        return self._scratch_caches

    def _admit(self, prompts: list[list[int]], reqs: list[int], rows: list[int], gen, timer: "Timer | None" = None):
        """Prefill ``prompts[reqs]`` for rows ``rows``: (first tokens, their drafts, prompt lengths), [n] each.

        The prompts are prefilled and drafted for in the scratch caches (rows 0..n-1, as
        ``step.prefill`` and the drafter expect), padded to the scratch's rows and to this group's
        longest prompt, which ``_prefill`` rounds up to a multiple of ``PREFILL_ALIGN``: a few
        shapes (one CUDA graph each) cover a call, and a group of short prompts is not padded to
        the call's longest, as it was until the H200 measured admissions at 1.2-2.2 ms a code
        request. Then the start of each block, every position the admission wrote, is copied into
        its row's block of the main caches (padding rows into the spare block, which no row reads).
        Past that the row keeps its previous request's keys, which no query reads: a step writes
        its positions before attending to them. With ``timer``, the first draft is timed: the fourth
        value is its (start, end) marks, else None.
        """
        K, dev = self.config.k, self.device
        scratch_t, scratch_d = self._scratch_caches
        S, n, max_len = scratch_t.max_batch, len(reqs), scratch_t.max_len
        width = max(len(prompts[q]) for q in reqs)
        batch = [prompts[q] + [0] * (width - len(prompts[q])) for q in reqs] + [[0] * width] * (S - n)
        ids = torch.tensor(batch, dtype=torch.long, device=dev)
        lens = torch.tensor([len(prompts[q]) for q in reqs] + [1] * (S - n), device=dev)
        pos = torch.arange(width, device=dev).expand(S, width).contiguous()
        out, ids, pos, graph_first = self._prefill(ids, pos, lens, scratch_t, max_len, K > 0, tag="admit")
        nxt = step.sample(out.logits[:, 0], self.config.temperature, gen)
        draft, marks = self._draft(scratch_d, out.taps, ids, pos, lens - 1, nxt, max_len, gen, timer,
                                   graph_first=graph_first, tag="admit", first=True) if K else (None, None)
        dest = torch.tensor(rows + [self._cache_t.max_batch - 1] * (S - n), device=dev)
        # written: the prompt (< the padded width) and, in the drafter's cache, the first draft's K slots
        written = padded_prefill_width(width, max_len) + K + 1
        copy_kv_blocks(scratch_t, self._cache_t, dest, written)
        if K:
            copy_kv_blocks(scratch_d, self._cache_d, dest, written)
        return nxt[:n], draft, lens[:n], None if marks is None or timer is None else (marks[0], marks[2])

    def _generate_continuous(self, prompts: list[list[int]], max_new_tokens, eos_token_ids,
                             c: int) -> GenerationResult:
        """``generate`` with ``c`` rows for more than ``c`` prompts: finished rows take the next prompts."""
        cfg, K, dev = self.config, self.config.k, self.device
        max_new, eos, need = self._check_request(prompts, max_new_tokens, eos_token_ids)
        gen = torch.Generator(device=dev).manual_seed(cfg.seed)
        refill = max(1, c // cfg.refill_divisor)  # rows admitted together: the scratch caches' rows
        cache_t, cache_d = self._caches(c + 1, need)  # block c: the spare that padding rows land in
        max_len = cache_t.max_len
        self._scratch(refill, max_len)
        queue, results = deque(range(len(prompts))), [None] * len(prompts)
        owner, outs, done = [-1] * c, [[] for _ in range(c)], [True] * c  # a free row counts as done
        st = _State.idle(c, K, dev)
        counts, trace, timer, spans, draft_spans = _Counts(K), [], Timer(dev), [], []
        was_done = list(done)  # the flags st.active holds (every row free)
        t0 = time.perf_counter()

        def release() -> list[int]:  # rows whose request finished (at the last step or at once): free
            for b in range(c):
                if owner[b] >= 0 and done[b]:
                    results[owner[b]], owner[b] = step.trim(outs[b], eos, max_new), -1
            return [b for b in range(c) if owner[b] < 0]

        while True:
            free = release()
            if queue and free and (len(free) >= min(refill, len(queue)) or len(free) == c):
                start = timer.mark()
                while queue and free:
                    reqs = [queue.popleft() for _ in free[: min(refill, len(queue))]]
                    rows, free = free[: len(reqs)], free[len(reqs):]
                    first, draft, lens, drafted = self._admit(prompts, reqs, rows, gen, timer)
                    if drafted is not None:
                        draft_spans.append(drafted)
                    st = self._admitted(st, rows, first, draft, lens)
                    for b, q, t in zip(rows, reqs, first.tolist()):
                        owner[b], outs[b] = q, [t]
                        done[b] = step.finished(outs[b], eos, max_new)
                spans.append((start, timer.mark()))
                free = release()  # a first token can finish a request
            if len(free) == c:
                if queue:
                    continue
                break
            if done != was_done:  # a row started or stopped decoding: new flags (as the static loop does)
                st = _State(st.nxt, st.draft, st.start, _device_flags([not d for d in done], dev))
                was_done = list(done)
            v, draft, packed, marks = self._step(st, cache_t, cache_d, max_len, gen, timer)
            accepted_now = step.accept(outs, done, [r[:-1] for r in packed], [r[-1] for r in packed], eos, max_new)
            if K:
                counts.add(accepted_now)
            st = _State(v.next_tokens, draft, v.start, st.active)
            trace.append((len(trace), *marks, tuple(accepted_now), draft.num_forwards if K else 0, c))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        prefill_s = sum(timer.ms(a, b) for a, b in spans) / 1e3
        metrics = counts.metrics(cfg.method, len(prompts), len(trace), sum(len(r) for r in results), prefill_s,
                                 max(wall - prefill_s, 0.0), sum(timer.ms(a, b) for a, b in draft_spans) / 1e3)
        return GenerationResult(results, metrics, [_step_trace(timer, *t) for t in trace])

    def _admitted(self, st: "_State", rows: list[int], nxt: torch.Tensor, draft: DraftResult | None,
                  lens: torch.Tensor) -> "_State":
        """``st`` with rows ``rows`` set to new requests (new tensors: the old ones may be a graph's outputs)."""
        idx = torch.tensor(rows, device=self.device)
        new = None
        if draft is not None:
            n = len(rows)
            probs = None
            if st.draft.draft_probs is not None or draft.draft_probs is not None:
                old = st.draft.draft_probs
                if old is None:
                    old = torch.zeros(st.draft.tokens.shape + draft.draft_probs.shape[2:], device=self.device)
                probs = old.index_copy(0, idx, draft.draft_probs[:n])
            new = DraftResult(st.draft.tokens.index_copy(0, idx, draft.tokens[:n]), probs, draft.num_forwards,
                              draft.inputs)
        return _State(st.nxt.index_copy(0, idx, nxt), new, st.start.index_copy(0, idx, lens.to(st.start.dtype)),
                      st.active)

    def _check_request(self, prompts, max_new_tokens, eos_token_ids) -> tuple[int, set[int], int]:
        """Validate one ``generate`` call: (max_new, eos ids, KV positions a request needs)."""
        K = self.config.k
        max_new = self.config.max_new_tokens if max_new_tokens is None else max_new_tokens
        eos = set(self.target.config.eos_token_ids if eos_token_ids is None else check_eos(eos_token_ids))
        lens = check_prompts(prompts, self.target.config.vocab_size)
        if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1:
            raise ValueError(f"max_new_tokens={max_new!r} must be an integer >= 1")
        need = max(lens) + max_new + K + 1
        limit = self.target.config.max_position_embeddings
        if need > limit:
            raise ValueError(f"longest prompt ({max(lens)} tokens) + max_new_tokens ({max_new}) + K ({K}) "
                             f"+ 1 = {need} exceeds the model's context of {limit} positions")
        return max_new, eos, need


class _Counts:
    """vLLM's spec-decode counters, accumulated over the steps of one ``generate``."""

    def __init__(self, k: int) -> None:
        self.k, self.drafts, self.accepted = k, 0, 0
        self.per_position = [0] * k

    def add(self, accepted: list[int]) -> None:
        """One step: each request that was decoding drafted once and kept ``accepted[i]`` drafts."""
        self.drafts += len(accepted)
        self.accepted += sum(accepted)
        for n in accepted:
            for i in range(n):
                self.per_position[i] += 1

    def metrics(self, method: str, c: int, steps: int, output_tokens: int, prefill_s: float,
                decode_s: float, first_draft_s: float) -> Metrics:
        return Metrics(method, self.k, c, steps, self.drafts, self.drafts * self.k, self.accepted,
                       tuple(self.per_position), output_tokens, prefill_s, decode_s, first_draft_s)


@dataclass(frozen=True)
class _State:
    """What the decode loop carries from one step to the next, on the device."""

    nxt: torch.Tensor  # [c] each request's newest token (the bonus), not yet seen by the target
    draft: DraftResult | None  # the pending drafts, tokens [c, K]; None for plain decoding
    start: torch.Tensor  # [c] the position of ``nxt``
    active: torch.Tensor  # [c] bool, requests still decoding (finished ones write no KV)

    @classmethod
    def idle(cls, c: int, k: int, device: torch.device) -> "_State":
        """``c`` rows with no request: token 0 at position 0, zero drafts (K = ``k``; none for 0), none active."""
        zeros = torch.zeros(c, dtype=torch.long, device=device)
        draft = DraftResult(torch.zeros(c, k, dtype=torch.long, device=device), None, 0, None) if k else None
        return cls(zeros, draft, zeros.clone(), torch.zeros(c, dtype=torch.bool, device=device))


class _Verified(NamedTuple):
    """One verify part's outputs (on CUDA at temperature 0, the static outputs of its graph)."""

    ids: torch.Tensor  # [c, K+1] the verified batch
    positions: torch.Tensor  # [c, K+1]
    taps: torch.Tensor | None  # [c, K+1, 3H]
    num_accepted: torch.Tensor  # [c]
    next_tokens: torch.Tensor  # [c] the bonus token of the next step
    start: torch.Tensor  # [c] its position
    packed: torch.Tensor  # [c, K+2] the new tokens (-1 padded), then num_accepted: one host read


def _verified(logits, taps, ids, positions, pending: DraftResult | None, start, active, temperature: float, gen,
              backend: str) -> _Verified:
    """Verify (or, without drafts, sample) and advance each active request's position."""
    if pending is None:
        nxt = step.sample(logits[:, 0], temperature, gen)
        n, tokens = torch.zeros_like(nxt), nxt[:, None]
    else:
        res = step.verify(logits, pending, temperature, gen, backend)
        nxt, n, tokens = res.next_tokens, res.num_accepted, res.output_tokens
    start = torch.where(active, start + n + 1, start)
    return _Verified(ids, positions, taps, n, nxt, start, torch.cat([tokens, n[:, None]], 1))


class _Readback:
    """A small device tensor on its way to the host: the copy starts now, ``wait`` returns its values.

    On CUDA the copy goes to pinned memory behind an event, so the host waits for this copy
    only, not for the work queued after it (the drafter's passes).
    """

    def __init__(self, t: torch.Tensor) -> None:
        self.event = None
        if t.device.type == "cuda":
            self.host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            self.host.copy_(t, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = t

    def wait(self) -> list:
        if self.event is not None:
            self.event.synchronize()
        return self.host.tolist()


def _kv_tensors(cache) -> list[torch.Tensor]:
    """A cache's K and V as [tensors, rows, n_kv, hd]: its one stacked tensor, or each layer's as a view."""
    return [cache.kv] if cache.kv is not None else [t[None] for t in (*cache.k, *cache.v)]


def _blocks(t: torch.Tensor, rows: int, L: int, n: int) -> torch.Tensor:
    """[tensors, rows * L + 1, n_kv, hd] -> [tensors, rows, n, n_kv, hd]: the first n positions of each block."""
    return t[:, : rows * L].view(t.shape[0], rows, L, *t.shape[2:])[:, :, :n]


def move_kv_blocks(cache, order: list[int], length: int | None = None) -> None:
    """Blocks ``order`` of ``cache`` into its blocks ``0..len(order)-1``, every layer's in one copy a block.

    How ``SpecDecoder``'s row compaction keeps each request's keys with its row. ``order`` rises
    strictly, so block ``order[j] >= j`` is read before any copy writes it, and no temporary (which a
    gather of long-context blocks would make gigabytes large) is needed. ``length`` moves only each
    block's first positions (the rest of a destination block keeps what it held).
    """
    if any(a >= b for a, b in zip(order, order[1:])) or (order and not 0 <= order[0] <= order[-1] < cache.max_batch):
        raise ValueError(f"order={order!r}: expected rising block numbers below {cache.max_batch}")
    L = cache.max_len
    n = L if length is None else min(length, L)
    for t in _kv_tensors(cache):
        b = _blocks(t, cache.max_batch, L, n)
        for dst, src in enumerate(order):
            if src != dst:
                b[:, dst] = b[:, src]


def copy_kv_blocks(src, dst, dest: torch.Tensor, length: int | None = None) -> None:
    """Block ``j`` of KV cache ``src`` into block ``dest[j]`` of ``dst`` (one max_len), every layer.

    How a scratch cache's prefill reaches the rows it was made for: ``SpecDecoder``'s continuous
    batching and ``StreamDecoder``'s refills. ``length`` copies only each block's first positions
    (at most max_len); the rest of the destination block stays as it was.
    """
    L = src.max_len
    n = L if length is None else min(length, L)
    if n < 1:
        raise ValueError(f"length={length!r}: expected at least one position to copy")
    if src.kv is not None and dst.kv is not None:  # every layer's K and V in one copy
        pairs = [(dst.kv, src.kv)]
    else:  # caches built from separate tensors: one copy a tensor
        pairs = [(m[None], p[None]) for m, p in zip((*dst.k, *dst.v), (*src.k, *src.v))]
    for main, part in pairs:
        _blocks(main, dst.max_batch, L, n).index_copy_(1, dest, _blocks(part, src.max_batch, L, n))


def _may_continue(outputs: list[list[int]], done: list[bool], max_new: int) -> bool:
    """Whether a plain-decoding request may still be decoding after the step in flight.

    That step gives every unfinished request exactly one token, so a request with fewer than
    ``max_new - 1`` tokens cannot have reached its length limit by then (an EOS may still end it).
    ``generate`` queues the next step only when this holds: a run that stops at its length
    limit queues no step it throws away; one that stops at an EOS throws away at most one.
    Queuing ahead is safe for a finished request: its outputs are ignored, and writes past its
    cache block are dropped (``step.kv_slots``).

    >>> _may_continue([[1, 2], [3]], [False, True], max_new=3), _may_continue([[1, 2]], [False], max_new=3)
    (False, False)
    >>> _may_continue([[1]], [False], max_new=3)
    True
    """
    return any(not d and len(o) + 1 < max_new for o, d in zip(outputs, done))


def _device_flags(flags: list[bool], device: torch.device) -> torch.Tensor:
    """``flags`` as a bool tensor on ``device``, copied without a host synchronisation."""
    t = torch.tensor(flags, dtype=torch.bool)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _step_trace(timer: Timer, i: int, m0: int, m1: int, marks, accepted: tuple[int, ...], forwards: int,
                rows: int) -> StepTrace:
    """A ``StepTrace`` from the timer's marks (read after the final synchronisation)."""
    prep = timer.ms(marks[0], marks[1]) if marks else 0.0
    draft = timer.ms(marks[1], marks[2]) if marks else 0.0
    return StepTrace(i, timer.ms(m0, m1), prep, draft, accepted, forwards, rows)


def check_prompts(prompts, vocab_size: int) -> list[int]:
    """Validate a batch of token-id prompts; return their lengths."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {type(prompts).__name__}")
    lens = []
    for i, p in enumerate(prompts):
        if isinstance(p, str) or not isinstance(p, (list, tuple)):
            raise ValueError(f"prompt {i} must be a list of token ids, got {type(p).__name__} "
                             "(encode text with the tokenizer's chat template first)")
        if not p:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
        odd = [t for t in p if not isinstance(t, int) or isinstance(t, bool)]
        if odd:
            raise ValueError(f"prompt {i} holds {type(odd[0]).__name__} values, not Python ints: {odd[:5]} "
                             "(convert tensors and arrays with .tolist())")
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt {i} has token ids outside [0, {vocab_size}): {bad[:5]}")
        lens.append(len(p))
    return lens


def check_eos(eos_token_ids) -> tuple[int, ...]:
    """Validate ``eos_token_ids`` (a list or tuple of ints; empty: never stop early)."""
    if not isinstance(eos_token_ids, (list, tuple, set, frozenset)) or \
            any(not isinstance(t, int) or isinstance(t, bool) for t in eos_token_ids):
        raise ValueError(f"eos_token_ids={eos_token_ids!r} must be a list or tuple of token ids "
                         "(() never stops early; None uses the model's)")
    return tuple(eos_token_ids)

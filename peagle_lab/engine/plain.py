"""Bulk plain decoding on the device: ``StreamDecoder``, continuous batching with the loop on the GPU.

``SpecDecoder.generate`` without ``concurrency`` decodes a fixed batch: a request that ends
early keeps its row until the longest one ends, and the host reads the new tokens after every
step. Generating training data that way (chunks of 1024 prompts, up to 320 tokens each) leaves
many rows idle, since responses vary widely in length (``docs/results/history.md`` has the
measurement). This decoder keeps ``concurrency`` rows busy instead, and keeps the loop on the
device:

```
device state, one entry per row: token, position, active, count, limit, out [c, max_new]
step (one CUDA graph at temperature 0): target([c, 1]) ─► next token ─► out[row, count] where
      active; count + 1; EOS or count = limit ─► inactive          (no host read)
every sync_every steps the host reads active [c]: finished rows' tokens come back, and once
      refill_at rows are free the next prompts are prefilled into them
```

A refill prefills the new prompts into a scratch cache (rows 0..n-1, as ``step.prefill``
expects), then copies each prompt's keys and values into its row's block of the main cache.
Prefills run at padded shapes (rows to a power of two, width to a multiple of 64), so on CUDA
each shape is one CUDA graph too: on the H200 an eager prefill of ~100 prompts took ~65 ms,
mostly kernel launches from Python.
Prompts are admitted shortest first in *buckets* of at least ``bucket_factor × c`` prompts;
each bucket sizes the block length ``L`` for its longest prompt (decode attention reads the
whole block of every row, so one ``L`` for all prompts would make short ones pay for long
ones), and a bucket's rows drain before the next bucket starts.

Admission follows the engine's one continuous-batching policy (``batching.Scheduler``), the
same object ``SpecDecoder``'s host-read loop uses. This is the engine's one implementation of bulk
plain decoding: ``peagle_lab.stream.StreamDecoder`` (the data generator's) is this class, and
``SpecDecoder(target, None, SpecConfig(method="baseline", device_loop=True)).generate(prompts,
concurrency=c)`` runs it too (``loop.SpecDecoder``).

Greedy output is the target's greedy continuation of each prompt, as ``SpecDecoder``'s plain
decoding makes it (``tests/test_stream.py`` checks equality in float32 with refills, EOS and
per-request limits). Sampling draws from ``softmax(logits / T)`` by the Gumbel-max rule with
hashed noise (:mod:`peagle_lab.engine.sampling`): a sampled step replays in the same CUDA graph
as a greedy one, and a request's sample does not depend on which rows ran beside it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .. import step
from ..config import check_int
from ..models.kv_cache import KVCache
from ..models.llama import LlamaModel, call_layer, fuse_projections
from .batching import KV_BLOCK_ALIGN, Scheduler, copy_kv_blocks
from .checks import check_eos, check_prompts
from .forwards import padded_prefill_width
from .graphs import CudaGraphs, capture_graph, compiled
from .metrics import Timer
from .sampling import gumbel_pick, seed32, token_hashes

__all__ = ["StreamDecoder", "StreamResult", "StreamStats", "EOS_SLOTS", "check_limits"]

EOS_SLOTS = 8  # end-of-sequence ids the device state holds (padded with -1, which no token equals)


@dataclass
class StreamStats:
    """Where a ``StreamDecoder.generate`` call spent its time, and how busy its rows were."""

    requests: int = 0  # prompts admitted (each decoded to its end)
    output_tokens: int = 0  # tokens returned, EOS included
    steps: int = 0  # decode steps (every row advances one token a step)
    row_steps: int = 0  # rows holding an unfinished request, summed over steps
    prefills: int = 0  # admissions (batched prefills)
    buckets: int = 0
    prefill_s: float = 0.0  # device time of the admissions (CUDA events; wall time on a CPU)
    decode_s: float = 0.0  # the rest of the loop's wall time
    warmup_s: float = 0.0  # decode-graph capture and first compilation (inside decode_s)
    prefill_warmup_s: float = 0.0  # prefill-graph capture and first compilation (inside prefill_s)

    @property
    def decode_tokens(self) -> int:
        """Tokens made by decode steps (each request's first token comes from its prefill)."""
        return self.output_tokens - self.requests

    @property
    def row_use(self) -> float | None:
        """The share of row-steps that made a token (1 when no row ever waits)."""
        return self.decode_tokens / self.row_steps if self.row_steps else None


class StreamResult(NamedTuple):
    tokens: list[list[int] | None]  # per prompt, in the order given; None: never admitted
    stats: StreamStats


class _Rows:
    """The device state of ``c`` rows, and the host's view of which request each row holds."""

    def __init__(self, c: int, max_new: int, eos_slots: int, device: torch.device) -> None:
        long = dict(dtype=torch.long, device=device)
        self.token, self.pos, self.key = torch.zeros(c, **long), torch.zeros(c, **long), torch.zeros(c, **long)
        self.count, self.limit = torch.zeros(c, **long), torch.ones(c, **long)
        self.active = torch.zeros(c, dtype=torch.bool, device=device)
        self.out = torch.zeros(c, max_new, **long)
        self.eos = torch.full((eos_slots,), -1, **long)
        self.request = [-1] * c  # host: the request in each row, -1 when free

    def fits(self, c: int, max_new: int, eos: Sequence[int]) -> bool:
        return self.active.shape[0] == c and self.out.shape[1] >= max_new and len(eos) <= self.eos.shape[0]

    def set_eos(self, eos: Sequence[int]) -> None:
        """This call's EOS ids, in place (a captured graph reads the same tensor)."""
        self.eos.fill_(-1)
        self.eos[: len(eos)] = torch.tensor(list(eos), dtype=torch.long, device=self.eos.device)


class StreamDecoder:
    """Continuous batching of plain decoding over many prompts (see the module docstring).

    Args:
        target: the target ``LlamaModel``.
        concurrency: rows decoded together.
        temperature: 0 for greedy, else sampling from ``softmax(logits / temperature)``.
        seed: the sampling noise's seed (see ``sampling_uniforms``).
        cuda_graphs: replay each greedy decode step as one CUDA graph (CUDA only).
        compile: ``"auto"`` (on CUDA), ``"on"`` or ``"off"``: each decoder layer compiled, as in
            ``SpecDecoder``.
        sync_every: decode steps between two host reads of the rows' state.
        refill_at: free rows that trigger an admission (default ``max(1, c // 16)``).
        bucket_factor: a bucket holds at least this many times ``concurrency`` prompts.

    Raises:
        ValueError: a target that is not a ``LlamaModel``, a value out of range.
    """

    def __init__(self, target: LlamaModel, *, concurrency: int = 256, temperature: float = 0.0, seed: int = 0,
                 cuda_graphs: bool = True, compile: str = "auto", sync_every: int = 4,
                 refill_at: int | None = None, bucket_factor: int = 8) -> None:
        if not isinstance(target, LlamaModel):
            raise ValueError(f"target must be a LlamaModel (peagle_lab.load_model), got {type(target).__name__}")
        check_int("concurrency", concurrency, 1)
        check_int("sync_every", sync_every, 1, 4096)
        check_int("bucket_factor", bucket_factor, 1)
        if refill_at is not None:
            check_int("refill_at", refill_at, 1, concurrency)
        if not isinstance(temperature, (int, float)) or not temperature >= 0 or temperature == float("inf"):
            raise ValueError(f"temperature={temperature!r} must be a finite number >= 0")
        if compile not in ("auto", "on", "off"):
            raise ValueError(f"compile={compile!r}; expected 'auto', 'on' or 'off'")
        self.target, self.c, self.temperature, self.seed = target, concurrency, float(temperature), seed
        self.device = target.device
        self.sync_every, self.bucket_factor = sync_every, bucket_factor
        self.refill_at = refill_at or max(1, concurrency // 16)
        fuse_projections(target)
        self.use_graphs = cuda_graphs and self.device.type == "cuda"
        on = compile == "on" or (compile == "auto" and self.device.type == "cuda")
        self._layer_fn = compiled(call_layer) if on else None
        self._gumbel = compiled(gumbel_pick) if on else gumbel_pick  # one fused kernel instead of ~15 passes
        self._seed_t = torch.tensor(seed32(seed), device=self.device)
        self._temp_t = torch.tensor(max(self.temperature, 1e-6), device=self.device)
        self._tokens_t = token_hashes(target.config.vocab_size, self.device)
        self._cache: KVCache | None = None
        self._scratch: KVCache | None = None
        self._rows: _Rows | None = None
        self._graphs = CudaGraphs()  # decode steps by block length; prefills (one shared pool) by shape
        self.cache_allocations = 0

    @property
    def warmup_s(self) -> float:
        """Seconds spent compiling and capturing CUDA graphs so far (0 without graphs)."""
        return self._graphs.warmup_s

    # ------------------------------------------------------------------ storage
    def _storage(self, max_len: int, max_new: int, eos: Sequence[int]) -> None:
        """The main cache (c rows × ``max_len``), the scratch cache and the row state, kept across calls."""
        if self._cache is None or max_len > self._cache.max_len:
            self._graphs.graphs.clear()  # they point at the old tensors
            self._cache = self._scratch = self._graphs.pool = None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
                self._graphs.pool = torch.cuda.graph_pool_handle()
            self._cache = self.target.allocate_cache(self.c + 1, max_len)  # block c: the spare (see _admit)
            self._scratch = self.target.allocate_cache(max(self.refill_at, self.c // 4), max_len)
            self.cache_allocations += 1
        if self._rows is None or not self._rows.fits(self.c, max_new, eos):
            self._graphs.graphs.clear()
            self._rows = _Rows(self.c, max_new, max(EOS_SLOTS, len(eos)), self.device)
        self._rows.set_eos(eos)

    # ------------------------------------------------------------------ the step
    def _pick(self, logits: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The next token after each row's ``positions``: argmax at temperature 0, else a Gumbel-max sample."""
        if self.temperature == 0:
            return logits.argmax(-1)
        return self._gumbel(logits, self._temp_t, self._seed_t, keys, positions, self._tokens_t)

    def _step(self, cache: KVCache) -> None:
        """One decode step of every row, entirely on the device (the body of the CUDA graph)."""
        r = self._rows
        a = r.active
        pos = r.pos[:, None]
        slots = step.kv_slots(pos, a[:, None], cache.max_len)
        logits, _ = step.target_step(self.target, cache, r.token[:, None], pos, slots, taps=False,
                                     layer_fn=self._layer_fn)
        nxt = self._pick(logits[:, 0], r.key, r.pos)
        at = r.count.clamp(max=r.out.shape[1] - 1)[:, None]
        r.out.scatter_(1, at, torch.where(a, nxt, r.out.gather(1, at)[:, 0])[:, None])
        r.count.add_(a.long())
        # a broadcast compare, not torch.isin: isin sorts (and syncs) when c is small next to the ids
        stop = (nxt[:, None] == r.eos).any(-1) | (r.count >= r.limit)
        r.token.copy_(torch.where(a, nxt, r.token))
        r.pos.add_(a.long())
        r.active.copy_(a & ~stop)

    def _run_steps(self, cache: KVCache, n: int) -> None:
        if not self.use_graphs:
            for _ in range(n):
                self._step(cache)
            return
        # captured at a bucket's start, while every row is free: the warm-up changes nothing
        graph = self._graphs.capture(cache.max_len, lambda: capture_graph(lambda: self._step(cache))[0])
        for _ in range(n):
            graph.replay()

    # ------------------------------------------------------------------ admission
    def _admit(self, cache: KVCache, rows: list[int], reqs: list[int], prompts, limits, direct: bool) -> None:
        """Prefill ``prompts[reqs]`` and set up rows ``rows`` (each request's first token included).

        ``direct`` (every row free, ``rows`` = 0..n-1): prefill straight into the main cache; else
        into the scratch cache, then copied into the rows' blocks. The prefill runs at a padded
        shape, rows to a power of two and width to a multiple of ``PREFILL_ALIGN`` (padding rows
        land in free rows or in the spare block ``c``), so on CUDA it replays as one graph per
        shape instead of launching every kernel from Python.
        """
        r, dev, n = self._rows, self.device, len(rows)
        cap = self.c if direct else self._scratch.max_batch
        # rows: a power of two, at least refill_at's (few shapes, so few graphs to capture)
        nb = min(cap, 1 << max(0, max(n, self.refill_at) - 1).bit_length())
        width = max(len(prompts[q]) for q in reqs)
        tb = padded_prefill_width(width, cache.max_len)
        pad = [0] * tb
        ids = torch.tensor([(prompts[q] + pad)[:tb] for q in reqs] + [pad] * (nb - n), device=dev)
        lens = torch.tensor([len(prompts[q]) for q in reqs] + [1] * (nb - n), device=dev)
        keys = torch.tensor(reqs + [0] * (nb - n), device=dev)
        dest = torch.tensor(rows + [self.c] * (nb - n), device=dev)  # padding rows land in the spare block

        def fn(ids, lens, keys, dest):
            pos = torch.arange(ids.shape[1], device=dev).expand_as(ids)
            dst = cache if direct else self._scratch.view(ids.shape[0], cache.max_len)
            out = step.prefill(self.target, ids, pos, lens, dst, cache.max_len, taps=False, layer_fn=self._layer_fn)
            if not direct:  # the main cache as c + 1 blocks of this bucket's length, the last one spare;
                # only the prefill's positions (< tb): a reused row's later keys are never read before rewritten
                copy_kv_blocks(dst, self._cache.view(self.c + 1, cache.max_len), dest, tb)
            return self._pick(out.logits[:, 0], keys, lens - 1)

        args = (ids, lens, keys, dest)
        key = ("prefill", cache.max_len, nb, tb, direct)
        first = (self._graphs.run(key, fn, *args) if self.use_graphs else fn(*args))[:n]
        rt, lens = dest[:n], lens[:n]
        lim = torch.tensor([limits[q] for q in reqs], device=dev)
        r.token[rt], r.pos[rt], r.count[rt], r.limit[rt] = first, lens, torch.ones_like(lens), lim
        r.out[rt, 0], r.key[rt] = first, keys[:n]
        r.active[rt] = ~((first[:, None] == r.eos).any(-1) | (lim <= 1))
        for b, q in zip(rows, reqs):
            r.request[b] = q

    def _collect(self, results: list, on_result) -> list[int]:
        """Rows whose request finished since the last read: their tokens to ``results``; returns them freed."""
        r = self._rows
        active = r.active.tolist()  # the host's one read per sync_every steps
        done = [b for b, q in enumerate(r.request) if q >= 0 and not active[b]]
        if not done:
            return []
        idx = torch.tensor(done, device=self.device)
        counts, outs = r.count[idx].tolist(), r.out[idx].tolist()
        for b, n, toks in zip(done, counts, outs):
            q = r.request[b]
            results[q] = toks[:n]
            r.request[b] = -1
            if on_result is not None:
                on_result(q, results[q])
        return done

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new_tokens: int | Sequence[int],
                 eos_token_ids: Sequence[int] | None = None, *, admit: Callable[[], bool] | None = None,
                 on_result: Callable[[int, list[int]], None] | None = None,
                 progress: Callable[[int], None] | None = None) -> StreamResult:
        """Decode every prompt (token ids) until EOS or its token limit, ``concurrency`` rows at a time.

        Args:
            max_new_tokens: one limit for all, or one per prompt.
            eos_token_ids: end-of-sequence ids (the target's by default); an EOS is kept.
            admit: asked before each admission; once it returns False no prompt starts (rows in
                flight finish, the rest come back as None).
            on_result: called with ``(index, tokens)`` as each request finishes.
            progress: called with the number of requests that finished since the last call.

        Returns:
            ``StreamResult``: the new tokens per prompt (None for prompts never admitted), stats.

        Raises:
            ValueError: empty or out-of-vocabulary prompts, bad limits or EOS ids, a prompt
                plus its limit beyond the model's context.
        """
        lens = check_prompts(prompts, self.target.config.vocab_size)
        limits = check_limits(max_new_tokens, len(prompts))
        eos = check_eos(self.target.config.eos_token_ids if eos_token_ids is None else eos_token_ids)
        ctx = self.target.config.max_position_embeddings
        for q, (n, m) in enumerate(zip(lens, limits)):
            if n + m + 1 > ctx:
                raise ValueError(f"prompt {q} ({n} tokens) + max_new_tokens ({m}) + 1 exceeds the model's "
                                 f"context of {ctx} positions")
        buckets = self._buckets(lens, limits)
        self._storage(max(L for L, _ in buckets), max(limits), eos)
        results: list[list[int] | None] = [None] * len(prompts)
        stats, warm0, t0 = StreamStats(buckets=len(buckets)), self.warmup_s, time.perf_counter()
        timer, spans = Timer(self.device), []  # spans: the admissions' (start, end) marks
        for L, reqs in buckets:
            if not self._bucket(self._cache.view(self.c, L), reqs, prompts, limits, results,
                                stats, (timer, spans), admit, on_result, progress):
                break
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        stats.prefill_s = sum(timer.ms(a, b) for a, b in spans) / 1e3
        stats.decode_s = time.perf_counter() - t0 - stats.prefill_s
        stats.warmup_s = self.warmup_s - warm0 - stats.prefill_warmup_s
        stats.output_tokens = sum(len(t) for t in results if t is not None)
        return StreamResult(results, stats)

    def _buckets(self, lens: list[int], limits: list[int]) -> list[tuple[int, list[int]]]:
        """Requests shortest first, cut into buckets of ≥ ``bucket_factor × c``, each with its block length."""
        order = sorted(range(len(lens)), key=lambda q: lens[q])
        size = self.bucket_factor * self.c
        cuts = list(range(0, len(order), size))
        if len(cuts) > 1 and len(order) - cuts[-1] < size:
            cuts.pop()  # a short last bucket joins the one before it
        out = []
        for a, b in zip(cuts, cuts[1:] + [len(order)]):
            reqs = order[a:b]
            need = max(lens[q] + limits[q] + 1 for q in reqs)
            out.append((-(-need // KV_BLOCK_ALIGN) * KV_BLOCK_ALIGN, reqs))
        return out

    def _bucket(self, cache, reqs, prompts, limits, results, stats, timing, admit, on_result, progress) -> bool:
        """Decode one bucket's requests until every admitted one ends; False once ``admit`` said no.

        Admission follows the engine's continuous-batching policy (``engine.batching.Scheduler``),
        with ``refill_at`` free rows as the refill and the scratch cache's rows as a group's limit.
        """
        (timer, spans), sched, allowed = timing, Scheduler(reqs, self.c, self.refill_at), True
        self._run_steps(cache, 0)  # capture now, while every row is free
        while True:
            if allowed and sched.due():
                allowed = admit is None or admit()
                while allowed and sched.queue and sched.free:
                    direct = not sched.busy  # an empty cache: prefill straight into rows 0..n-1
                    rows, group = sched.take(self.c if direct else self._scratch.max_batch)
                    start, warm = timer.mark(), self.warmup_s
                    self._admit(cache, rows, group, prompts, limits, direct)
                    spans.append((start, timer.mark()))
                    stats.prefill_warmup_s += self.warmup_s - warm
                    stats.prefills += 1
                    stats.requests += len(group)
            busy = sched.busy
            if busy == 0:
                return allowed
            self._run_steps(cache, self.sync_every)
            stats.steps += self.sync_every
            stats.row_steps += self.sync_every * busy
            done = self._collect(results, on_result)
            sched.release(done)
            if progress is not None and done:
                progress(len(done))


def check_limits(max_new_tokens, n: int) -> list[int]:
    """``max_new_tokens`` (one limit, or one per prompt) as ``n`` limits, each an int >= 1."""
    limits = [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(limits) != n:
        raise ValueError(f"max_new_tokens has {len(limits)} entries for {n} prompts")
    for m in limits:
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ValueError(f"max_new_tokens={m!r} must be an integer >= 1")
    return limits

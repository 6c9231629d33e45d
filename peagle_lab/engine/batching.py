"""Batching: the rows of a batch and the KV blocks they own. Admission and refill (continuous
batching), row compaction (a static batch that loses its finished requests), and the KV-cache
block moves both need.

```
Caches.main(c, max_len)        the KV caches reused across calls: request b owns block b (max_len slots)
Caches.scratch(rows, max_len)  where admissions are prefilled before copy_kv_blocks moves them into rows
Scheduler                      the queue, the free rows, when to refill them (both continuous loops)
Rows                           SpecDecoder's requests by row and their tokens
admitted(state, rows, …)       the state with new requests in ``rows``
compact(state, outputs, …)     live rows to the front (move_kv_blocks), the state following them
```
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import torch

from .. import step
from ..drafter import Drafter
from ..drafting import DraftResult
from ..models.llama import LlamaModel
from .graphs import CudaGraphs
from .state import State

__all__ = ["KV_BLOCK_ALIGN", "Caches", "Scheduler", "Rows", "admission_batch", "admitted", "compact", "move_kv_blocks",
           "copy_kv_blocks"]

KV_BLOCK_ALIGN = 64  # positions; see Caches.main


class Caches:
    """The target's and the drafter's KV caches of one engine, kept across ``generate`` calls.

    ``graphs``: the engine's graph sets; a captured graph points at the caches it was captured with,
    so reallocating a cache drops the graphs that use it. ``allocations`` counts how many times the
    main caches were allocated: a soak test's proof that they are reused (a freed and reallocated
    cache can land at the same address, so pointers cannot tell).
    """

    def __init__(self, target: LlamaModel, drafter: Drafter | None, k: int, decode_attention,
                 graphs: CudaGraphs, prefill_graphs: CudaGraphs) -> None:
        self.target, self.drafter, self.k, self.decode_attention = target, drafter, k, decode_attention
        self.graphs, self.prefill_graphs = graphs, prefill_graphs
        self.t = self.d = None  # the main caches: the target's, the drafter's (None for plain decoding)
        self.scratch_caches = None  # (target, drafter) caches that continuous batching admits through
        self.allocations = 0

    def _allocate(self, rows: int, max_len: int):
        t = self.target.allocate_cache(rows, max_len)
        t.decode_attention = self.decode_attention
        d = None
        if self.k:
            d = self.drafter.allocate_cache(rows, max_len)
            d.decode_attention = self.decode_attention
        return t, d

    def main(self, c: int, max_len: int):
        """The main caches, grown to at least ``c`` blocks of ``max_len`` positions: (target's, drafter's).

        A request's block is rounded up to a multiple of ``KV_BLOCK_ALIGN`` positions: the
        decode step attends over the whole block, and attention kernels want aligned key lengths:
        on the H200, cells whose block length is unaligned measure verify steps up to 45 % slower
        than their neighbours, so timings would jump with K.
        """
        max_len = -(-max_len // KV_BLOCK_ALIGN) * KV_BLOCK_ALIGN
        if self.t is None or c > self.t.max_batch or max_len > self.t.max_len:
            self.graphs.graphs.clear()  # they point at the old caches
            self.prefill_graphs.graphs.clear()
            self.prefill_graphs.pool = None  # a fresh pool with the new caches (as StreamDecoder does)
            self.t = self.d = None
            if self.target.device.type == "cuda":
                torch.cuda.empty_cache()
            self.t, self.d = self._allocate(c, max_len)
            self.allocations += 1
        return self.t, self.d

    def scratch(self, rows: int, max_len: int):
        """The target's and the drafter's scratch caches for admissions (``rows`` blocks of ``max_len``)."""
        cur = self.scratch_caches
        if cur is None or cur[0].max_batch != rows or cur[0].max_len != max_len:
            for key in [k for k in (*self.graphs.graphs, *self.prefill_graphs.graphs) if "admit" in k]:
                self.graphs.graphs.pop(key, None)  # they write to the old scratch caches
                self.prefill_graphs.graphs.pop(key, None)
            self.scratch_caches = self._allocate(rows, max_len)
        return self.scratch_caches

    def copy_admitted(self, rows: list[int], written: int) -> None:
        """The scratch caches' first ``len(rows)`` blocks into blocks ``rows`` of the main caches.

        Only each block's first ``written`` positions move: every position the admission wrote.
        The scratch's padding blocks land in the main caches' last (spare) block, which no row reads.
        Past ``written`` a row keeps its previous request's keys, which no query reads: a step
        writes its positions before attending to them.
        """
        scratch_t, scratch_d = self.scratch_caches
        S = scratch_t.max_batch
        dest = torch.tensor(rows + [self.t.max_batch - 1] * (S - len(rows)), device=self.target.device)
        copy_kv_blocks(scratch_t, self.t, dest, written)
        if self.k:
            copy_kv_blocks(scratch_d, self.d, dest, written)

    def tensors(self) -> list[torch.Tensor]:
        """Every K/V tensor of the main caches (none before the first use)."""
        return [t for cache in (self.t, self.d) if cache is not None for t in (*cache.k, *cache.v)]


class Scheduler:
    """Continuous batching's admission policy over ``c`` rows: the queue of requests, the free rows, when to refill.

    One policy for both continuous-batching loops: ``SpecDecoder``'s (speculative or plain, the host
    reads every step) and ``StreamDecoder``'s (plain decoding on the device, read every few steps). A
    finished request's row is released; once about ``refill`` rows are free (or none is busy) the next
    requests are admitted, the lowest free rows first, in groups no larger than the caller's limit
    (the rows its scratch cache holds).

    >>> s = Scheduler(range(6), c=4, refill=2)
    >>> s.due(), s.take(4), s.busy
    (True, ([0, 1, 2, 3], [0, 1, 2, 3]), 4)
    >>> s.release([2]); s.due()  # one free row, two requests waiting: not yet
    False
    >>> s.release([0]); s.due(), s.take(2)
    (True, ([0, 2], [4, 5]))
    """

    def __init__(self, requests: Iterable[int], c: int, refill: int) -> None:
        self.c, self.refill = c, refill
        self.queue, self.free = deque(requests), list(range(c))

    @property
    def busy(self) -> int:
        """Rows holding a request."""
        return self.c - len(self.free)

    def due(self) -> bool:
        """Whether to admit now: requests wait and a refill's worth of rows (or every row) is free."""
        free = len(self.free)
        return bool(self.queue and free and (free >= min(self.refill, len(self.queue)) or free == self.c))

    def take(self, limit: int) -> tuple[list[int], list[int]]:
        """The next admission, at most ``limit`` requests: (rows, requests), the lowest free rows first."""
        self.free.sort()
        n = min(len(self.free), len(self.queue), limit)
        rows, self.free = self.free[:n], self.free[n:]
        return rows, [self.queue.popleft() for _ in range(n)]

    def release(self, rows: list[int]) -> None:
        """Rows whose request finished are free again."""
        self.free += rows


class Rows:
    """``SpecDecoder``'s continuous batching on the host: the request each of ``c`` rows decodes, its tokens.

    A free row counts as done, so the decode step leaves it idle. Which rows take which requests,
    and when, is the :class:`Scheduler`'s.
    """

    def __init__(self, num_prompts: int, c: int, eos: set[int], max_new: int) -> None:
        self.c, self.eos, self.max_new = c, eos, max_new
        self.results = [None] * num_prompts
        self.owner, self.outs, self.done = [-1] * c, [[] for _ in range(c)], [True] * c
        self.prompt_lens = [0] * c  # of each row's latest request (a freed row keeps its last one's)

    def finished(self) -> list[int]:
        """Rows whose request finished (at the last step or at once): their tokens to ``results``, the rows freed."""
        rows = [b for b in range(self.c) if self.owner[b] >= 0 and self.done[b]]
        for b in rows:
            self.results[self.owner[b]], self.owner[b] = step.trim(self.outs[b], self.eos, self.max_new), -1
        return rows

    def start(self, rows: list[int], reqs: list[int], first_tokens: list[int], prompt_lens: list[int]) -> None:
        """Rows ``rows`` decode requests ``reqs``, whose first tokens are ``first_tokens`` and prompts
        ``prompt_lens`` tokens long."""
        for b, q, t, n in zip(rows, reqs, first_tokens, prompt_lens):
            self.owner[b], self.outs[b], self.prompt_lens[b] = q, [t], n
            self.done[b] = step.finished(self.outs[b], self.eos, self.max_new)

    def contexts(self) -> list[int]:
        """Each row's context: its (latest) request's prompt and the tokens it made (``metrics.step_contexts``)."""
        return [n + len(o) for n, o in zip(self.prompt_lens, self.outs)]

    def accept(self, packed: list[list[int]]) -> list[int]:
        """One step's packed rows (new tokens, then the count): ``step.accept`` over the busy rows."""
        return step.accept(self.outs, self.done, [r[:-1] for r in packed], [r[-1] for r in packed], self.eos,
                           self.max_new)


def admission_batch(prompts: list[list[int]], rows: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An admission's prefill batch in the scratch caches: ``ids`` and ``positions`` [rows, T], ``lengths`` [rows].

    The prompts fill rows 0..n-1 (as ``step.prefill`` and the drafter expect), padded to the scratch's
    ``rows`` (one-token rows of id 0) and to this group's longest prompt, which the prefill rounds up to
    a multiple of ``PREFILL_ALIGN``: a few shapes (one CUDA graph each) cover a call, and a group of
    short prompts is not padded to the call's longest.

    >>> ids, pos, lens = admission_batch([[5, 6], [7]], 3, "cpu")
    >>> ids.tolist(), lens.tolist()
    ([[5, 6], [7, 0], [0, 0]], [2, 1, 1])
    """
    n, width = len(prompts), max(map(len, prompts))
    batch = [p + [0] * (width - len(p)) for p in prompts] + [[0] * width] * (rows - n)
    ids = torch.tensor(batch, dtype=torch.long, device=device)
    lens = torch.tensor([len(p) for p in prompts] + [1] * (rows - n), device=device)
    return ids, torch.arange(width, device=device).expand(rows, width).contiguous(), lens


def admitted(st: State, rows: list[int], nxt: torch.Tensor, draft: DraftResult | None, lens: torch.Tensor) -> State:
    """``st`` with rows ``rows`` set to new requests (new tensors: the old ones may be a graph's outputs)."""
    idx = torch.tensor(rows, device=st.nxt.device)
    new = None
    if draft is not None:
        n = len(rows)
        probs = None
        if st.draft.draft_probs is not None or draft.draft_probs is not None:
            old = st.draft.draft_probs
            if old is None:
                old = torch.zeros(st.draft.tokens.shape + draft.draft_probs.shape[2:], device=st.nxt.device)
            probs = old.index_copy(0, idx, draft.draft_probs[:n])
        new = DraftResult(st.draft.tokens.index_copy(0, idx, draft.tokens[:n]), probs, draft.num_forwards,
                          draft.inputs)
    return State(st.nxt.index_copy(0, idx, nxt), new, st.start.index_copy(0, idx, lens.to(st.start.dtype)),
                 st.active)


def compact(st: State, outputs: list[list[int]], done: list[bool], written: int, caches) -> tuple:
    """Fewer rows once most of a static batch is done: (state, outputs, done), unchanged if no fewer fit.

    When the requests still decoding fit in half the rows, the next power of two of rows (those
    requests, padded with finished ones) move to the front of the KV ``caches`` (None entries are
    skipped), a block every layer's in one copy, and the state follows them; later steps run at that
    width, as a vLLM batch loses its finished requests. A row's result does not depend on the others,
    so the output is the same. ``written``: the positions of each block to move, past every position
    its row has written (a step writes its own positions before it attends to them: later ones need
    no copy).
    """
    width, live = len(done), [b for b, d in enumerate(done) if not d]
    w = 1 << (len(live) - 1).bit_length()  # the next power of two: a few widths, one graph set each
    if w > width // 2:
        return st, outputs, done
    order = sorted(live + [b for b, d in enumerate(done) if d][: w - len(live)])
    idx = torch.tensor(order, device=st.nxt.device)
    for cache in caches:
        if cache is not None:
            move_kv_blocks(cache, order, written)
    draft = st.draft
    if draft is not None:
        probs = None if draft.draft_probs is None else draft.draft_probs[idx]
        draft = DraftResult(draft.tokens[idx], probs, draft.num_forwards, draft.inputs)
    return (State(st.nxt[idx], draft, st.start[idx], st.active[idx]), [outputs[b] for b in order],
            [done[b] for b in order])


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


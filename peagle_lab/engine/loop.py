"""``SpecDecoder``: the decode loop, as :mod:`peagle_lab.step` teaches it.

```
generate(prompts)
  prefill   ─► the prompts' KV, each request's first token (the bonus), its first K drafts
  loop:  verify ─► the target over [bonus, drafts], greedy or rejection verification   (one graph)
         draft  ─► the next K drafts (P-EAGLE: 1 pass, EAGLE-3: K)                     (two graphs)
         accept ─► the host appends the accepted tokens and flags finished requests
```
The loop holds the host's bookkeeping; what runs on the device is in ``forwards`` (each forward
chosen once: eager, compiled or graphed), and the rows and KV blocks in ``batching``. Data flows
down: those modules and :mod:`peagle_lab.step` receive tensors and forwards, never the engine.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch

from .. import step
from ..config import SpecConfig, check_int
from ..drafter import Drafter
from ..drafting import DraftResult
from ..models.llama import LlamaModel, fuse_projections
from .batching import Caches, Rows, Scheduler, admission_batch, admitted, compact
from .checks import Request, check_engine, check_request
from .forwards import Forwards, padded_prefill_width
from .graphs import decode_attention_fn
from .metrics import Counts, GenerationResult, Timer, step_contexts, step_trace
from .plain import StreamDecoder, check_limits
from .state import Readback, State, device_flags

__all__ = ["SpecDecoder", "may_continue", "decode_on_device"]


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
        check_engine(target, drafter, config)
        self.target, self.drafter, self.config = target, drafter, config
        self.device = target.device
        # q/k/v and gate/up as one matrix product each: fewer kernels per decode step.
        fuse_projections(target)
        if drafter is not None:
            fuse_projections(drafter)
        self.forwards = Forwards(target, drafter, config)
        self.use_graphs, self.compiled, self._layer_fn = self.forwards.use_graphs, self.forwards.compiled, \
            self.forwards.layer_fn
        self._graphs, self._prefill_graphs = self.forwards.graphs, self.forwards.prefill_graphs
        self.decode_attention = decode_attention_fn(config.decode_attention, self.device)
        self.caches = Caches(target, drafter, config.k, self.decode_attention, self._graphs, self._prefill_graphs)
        # Called with every DraftResult the engine proposes (the vLLM check records drafts with it).
        self.on_draft: Callable[[DraftResult], None] | None = None
        self.plain: StreamDecoder | None = None  # SpecConfig.device_loop's decoder (decode_on_device)

    # ------------------------------------------------------------------ caches and graphs
    def reserve(self, concurrency: int, max_len: int) -> None:
        """Size the KV caches for ``concurrency`` requests of up to ``max_len`` tokens now.

        The caches grow on demand, and growing them drops the captured CUDA graphs; a
        benchmark reserves its largest cell once so that no timed pass pays for that.
        """
        self._caches(concurrency, max_len)

    def _caches(self, c: int, max_len: int):
        """The target's and the drafter's KV caches, reused across calls (so captured graphs stay valid)."""
        return self.caches.main(c, max_len)

    # The main and scratch caches, how often the main ones were allocated (a soak test's proof of reuse): Caches'.
    _cache_t = property(lambda self: self.caches.t, lambda self, cache: setattr(self.caches, "t", cache))
    _cache_d = property(lambda self: self.caches.d, lambda self, cache: setattr(self.caches, "d", cache))
    _scratch_caches = property(lambda self: self.caches.scratch_caches)
    cache_allocations = property(lambda self: self.caches.allocations)

    def cache_tensors(self) -> list[torch.Tensor]:
        """Every K/V tensor of the target's and the drafter's caches (none before the first use)."""
        return self.caches.tensors()

    @property
    def warmup_s(self) -> float:
        """Seconds spent compiling, warming up and capturing CUDA graphs so far (0 without graphs)."""
        return self._graphs.warmup_s + self._prefill_graphs.warmup_s

    compile_prefill = property(lambda self: self.forwards.compile_prefill,
                               lambda self, on: self.forwards.set_compile_prefill(on),
                               doc="Whether the prefill (and a first draft's passes over the prompts) run each "
                                   "layer compiled (``Forwards.set_compile_prefill``).")

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new_tokens: int | list[int] | None = None,
                 eos_token_ids: tuple[int, ...] | None = None, *, concurrency: int | None = None) -> GenerationResult:
        """Decode every prompt (token ids) until EOS or ``max_new_tokens``.

        ``concurrency``: decode at most this many requests at a time, with continuous batching (a
        finished request's row takes the next prompt; ``SpecConfig.device_loop``: ``decode_on_device``,
        where ``max_new_tokens`` may also be one limit per prompt); None decodes all prompts as one batch.

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
                if self.config.device_loop and not self.config.k:  # plain decoding's loop on the device
                    return decode_on_device(self, prompts, max_new_tokens, eos_token_ids, concurrency)
                return self._generate_continuous(prompts, max_new_tokens, eos_token_ids, concurrency)
        req = check_request(self.target, self.config, prompts, max_new_tokens, eos_token_ids)
        gen = torch.Generator(device=self.device).manual_seed(self.config.seed)
        caches = self._caches(len(prompts), req.need)
        max_len = caches[0].max_len  # request b owns slots [b*max_len, (b+1)*max_len)
        timer = Timer(self.device)

        t0 = time.perf_counter()
        # prefill: the prompts' KV, each request's first token (the bonus) and its first K drafts
        st, outputs, done, first_marks = self._first_step(prompts, req, caches, max_len, gen, timer)
        prefill_s = time.perf_counter() - t0  # the first tokens' read waited for the first drafts, queued before it
        t1 = time.perf_counter()
        # the loop: verify the drafts, draft the next ones, accept what was verified; until every request is done
        counts, trace = self._decode(st, list(outputs), done, req, caches, max_len, gen, timer, list(map(len, prompts)))
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        decode_s = time.perf_counter() - t1

        outs = [step.trim(o, req.eos, req.max_new) for o in outputs]
        first_draft_s = timer.ms(first_marks[0], first_marks[2]) / 1e3 if first_marks else 0.0
        metrics = counts.metrics(self.config.method, len(prompts), len(trace), sum(len(o) for o in outs), prefill_s,
                                 decode_s, first_draft_s)
        return GenerationResult(outs, metrics, [step_trace(timer, *t) for t in trace])

    def _first_step(self, prompts, req: Request, caches, max_len: int, gen, timer: Timer):
        """Prefill, the first token of each request, and its first drafts: (state, outputs, done, draft marks)."""
        K, cache_t, cache_d = self.config.k, *caches
        ids, pos, lens = step.pad_prompts(prompts, self.device)
        out, ids, pos, graph_first = self._prefill(ids, pos, lens, cache_t, max_len, K > 0)
        nxt = step.sample(out.logits[:, 0], self.config.temperature, gen)
        draft, marks = self._draft(cache_d, out.taps, ids, pos, lens - 1, nxt, max_len, gen, timer,
                                   graph_first=graph_first, first=True) if K else (None, None)
        outputs = [[t] for t in nxt.tolist()]
        done = [step.finished(o, req.eos, req.max_new) for o in outputs]
        # start: the position of each request's newest token (not yet processed by the target)
        return State(nxt, draft, lens.clone(), device_flags([not d for d in done], self.device)), outputs, done, marks

    def _decode(self, st: State, outputs: list[list[int]], done: list[bool], req: Request, caches, max_len: int,
                gen, timer: Timer, prompt_lens: list[int]) -> tuple[Counts, list]:
        """The decode loop from state ``st``: verify, draft, accept until every request is done; (counters, trace).

        ``outputs`` and ``done`` are by row: compaction reorders them (each request's list keeps growing, so
        the list itself finds the request's prompt length in ``prompt_lens``, for the step's contexts).
        Plain decoding queues step n + 1 before it reads step n (see :func:`may_continue`): no drafter
        runs while the host reads, so the GPU would otherwise idle through every read and launch.
        """
        K = self.config.k
        counts, trace = Counts(K), []
        prompt_of = {id(o): n for o, n in zip(outputs, prompt_lens)}

        def launch(s: State):  # one step queued, and the rows it runs live: s.active holds ``done``'s flags now
            return *self._launch(s, *caches, max_len, gen, timer), [not d for d in done]

        launched = launch(st) if not all(done) else None
        while not all(done):
            v, draft, rows, marks, ran = launched
            ahead = None
            if K == 0 and may_continue(outputs, done, req.max_new):
                ahead = State(v.next_tokens, None, v.start, st.active)
                launched = launch(ahead)
            packed = rows.wait()
            contexts = step_contexts([prompt_of[id(o)] + len(o) for o in outputs], done, ran)  # before accept
            was_done = list(done)
            accepted = step.accept(outputs, done, [r[:-1] for r in packed], [r[-1] for r in packed], req.eos,
                                   req.max_new)
            if K:
                counts.add(accepted)
            active = st.active if done == was_done else device_flags([not d for d in done], self.device)
            trace.append((len(trace), *marks, tuple(accepted), draft.num_forwards if K else 0, len(done), contexts))
            if ahead is not None:  # step n + 1 is queued; step n + 2 starts from its outputs
                nv = launched[0]
                st = State(nv.next_tokens, None, nv.start, active)
                continue
            st = State(v.next_tokens, draft, v.start, active)
            if not all(done):
                st, outputs, done = self._compact(st, outputs, done, max(prompt_lens), *caches)
            launched = launch(st) if not all(done) else None
        return counts, trace

    def _launch(self, st: State, cache_t, cache_d, max_len: int, gen, timer: Timer):
        """Queue one decode step of every row: (verified, the next drafts, a ``Readback`` of the new tokens, marks).

        The accepted tokens travel to the host while the drafter runs; the drafter drafts for every
        row, since waiting to learn which requests finished would idle the GPU. ``rows.wait()``
        gives the packed rows: [c][K+2], the new tokens (-1 padded), then the accepted count.
        """
        m0 = timer.mark()
        v = self.forwards.verify(st, cache_t, max_len, gen)
        m1 = timer.mark()
        rows = Readback(v.packed)
        draft, marks = None, None
        if self.config.k:
            draft, marks = self._draft(cache_d, v.taps, v.ids, v.positions, v.num_accepted, v.next_tokens,
                                       max_len, gen, timer)
        return v, draft, rows, (m0, m1, marks)

    def _step(self, st: State, cache_t, cache_d, max_len: int, gen, timer: Timer):
        """One decode step, waited for: as ``_launch`` with the packed rows read."""
        v, draft, rows, marks = self._launch(st, cache_t, cache_d, max_len, gen, timer)
        return v, draft, rows.wait(), marks

    def _prefill(self, ids, pos, lens, cache, max_len: int, taps: bool, tag: str = "batch"):
        """The prompts' prefill (``Forwards.prefill``): (output, the ids and positions the first draft reads,
        whether that draft may replay as a graph)."""
        return self.forwards.prefill(ids, pos, lens, cache, max_len, taps, tag=tag)

    def _draft(self, cache, taps, ids, pos, n, bonus, max_len: int, gen, timer: Timer | None = None,
               graph_first: bool = False, tag: str = "batch", first: bool = False):
        """K drafts for every row (``Forwards.draft``), shown to ``on_draft``: (result, timer marks)."""
        res, marks = self.forwards.draft(cache, taps, ids, pos, n, bonus, max_len, gen, timer, graph_first, tag,
                                         first)
        if self.on_draft is not None:
            self.on_draft(res)
        return res, marks

    def _compact(self, st: State, outputs: list[list[int]], done: list[bool], longest: int, *caches):
        """``batching.compact`` when ``SpecConfig.compact_rows``: (state, outputs, done). ``longest``: the
        longest prompt; each block moves up to past every position its row has written."""
        if not self.config.compact_rows:
            return st, outputs, done
        written = longest + max(map(len, outputs)) + 2 * self.config.k + 2
        return compact(st, outputs, done, written, caches)

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
        # compact's widths: the powers of two up to half the batch
        widths = [1 << i for i in reversed(range((concurrency // 2).bit_length()))]
        with torch.inference_mode():
            for w in widths:
                self._step(State.idle(w, self.config.k, self.device), cache_t, cache_d, cache_t.max_len,
                           torch.Generator(device=self.device), Timer(self.device))
        return widths

    # ------------------------------------------------------------------ continuous batching
    def _generate_continuous(self, prompts: list[list[int]], max_new_tokens, eos_token_ids,
                             c: int) -> GenerationResult:
        """``generate`` with ``c`` rows for more than ``c`` prompts: finished rows take the next prompts."""
        cfg, K, dev = self.config, self.config.k, self.device
        req = check_request(self.target, cfg, prompts, max_new_tokens, eos_token_ids)
        gen = torch.Generator(device=dev).manual_seed(cfg.seed)
        refill = max(1, c // cfg.refill_divisor)  # rows admitted together: the scratch caches' rows
        cache_t, cache_d = self._caches(c + 1, req.need)  # block c: the spare that padding rows land in
        max_len = cache_t.max_len
        self.caches.scratch(refill, max_len)
        sched, rows = Scheduler(range(len(prompts)), c, refill), Rows(len(prompts), c, req.eos, req.max_new)
        st = State.idle(c, K, dev)
        counts, trace, timer, spans, draft_spans = Counts(K), [], Timer(dev), [], []
        was_done = list(rows.done)  # the flags st.active holds (every row free)
        t0 = time.perf_counter()
        while True:
            sched.release(rows.finished())
            if sched.due():
                start = timer.mark()
                while sched.queue and sched.free:
                    group, reqs = sched.take(refill)
                    first, draft, lens, drafted = self._admit(prompts, reqs, group, gen, timer)
                    if drafted is not None:
                        draft_spans.append(drafted)
                    st = admitted(st, group, first, draft, lens)
                    rows.start(group, reqs, first.tolist(), [len(prompts[q]) for q in reqs])
                spans.append((start, timer.mark()))
                sched.release(rows.finished())  # a first token can finish a request
            if not sched.busy:
                if sched.queue:
                    continue
                break
            if rows.done != was_done:  # a row started or stopped decoding: new flags (as the static loop does)
                st = State(st.nxt, st.draft, st.start, device_flags([not d for d in rows.done], dev))
                was_done = list(rows.done)
            contexts = step_contexts(rows.contexts(), rows.done)
            v, draft, packed, marks = self._step(st, cache_t, cache_d, max_len, gen, timer)
            accepted = rows.accept(packed)
            if K:
                counts.add(accepted)
            st = State(v.next_tokens, draft, v.start, st.active)
            trace.append((len(trace), *marks, tuple(accepted), draft.num_forwards if K else 0, c, contexts))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        prefill_s = sum(timer.ms(a, b) for a, b in spans) / 1e3
        metrics = counts.metrics(cfg.method, len(prompts), len(trace), sum(len(r) for r in rows.results), prefill_s,
                                 max(wall - prefill_s, 0.0), sum(timer.ms(a, b) for a, b in draft_spans) / 1e3)
        return GenerationResult(rows.results, metrics, [step_trace(timer, *t) for t in trace])

    def _admit(self, prompts: list[list[int]], reqs: list[int], rows: list[int], gen, timer: Timer | None = None):
        """Prefill ``prompts[reqs]`` for rows ``rows``: (first tokens, their drafts, prompt lengths), [n] each.

        The prefill and the first drafts run in the scratch caches (``batching.admission_batch``), whose
        blocks then move into the rows' blocks of the main caches (``Caches.copy_admitted``). With
        ``timer``, the first draft is timed: the fourth value is its (start, end) marks, else None.
        """
        K, (scratch_t, scratch_d) = self.config.k, self.caches.scratch_caches
        max_len, width = scratch_t.max_len, max(len(prompts[q]) for q in reqs)
        ids, pos, lens = admission_batch([prompts[q] for q in reqs], scratch_t.max_batch, self.device)
        out, ids, pos, graph_first = self._prefill(ids, pos, lens, scratch_t, max_len, K > 0, tag="admit")
        nxt = step.sample(out.logits[:, 0], self.config.temperature, gen)
        draft, marks = self._draft(scratch_d, out.taps, ids, pos, lens - 1, nxt, max_len, gen, timer,
                                   graph_first=graph_first, tag="admit", first=True) if K else (None, None)
        # written: the prompt (< the padded width) and, in the drafter's cache, the first draft's K slots
        self.caches.copy_admitted(rows, padded_prefill_width(width, max_len) + K + 1)
        n = len(reqs)
        return nxt[:n], draft, lens[:n], None if marks is None or timer is None else (marks[0], marks[2])


def decode_on_device(engine: SpecDecoder, prompts: list[list[int]], max_new_tokens, eos_token_ids,
                     c: int) -> GenerationResult:
    """``engine.generate(prompts, concurrency=c)`` for plain decoding with ``SpecConfig.device_loop``.

    The prompts go through ``engine.plain``, a ``plain.StreamDecoder`` of ``c`` rows (made on the
    first such call, and again when ``c`` changes) whose loop runs on the device: it reads the rows
    every ``config.sync_every`` steps and admits once ``c // config.refill_divisor`` rows are free,
    through the same ``Scheduler`` as the host-read loop. Greedy tokens equal that loop's. The
    metrics count its steps (whole reads: a multiple of ``sync_every``); the trace is empty.
    ``max_new_tokens``: one limit (None: the config's) or a list of one per prompt.
    """
    cfg = engine.config
    limits = check_limits(max_new_tokens, len(prompts)) if isinstance(max_new_tokens, (list, tuple)) else None
    req = check_request(engine.target, cfg, prompts, max(limits) if limits else max_new_tokens, eos_token_ids)
    dec = engine.plain
    if dec is None or dec.c != c:
        dec = engine.plain = StreamDecoder(engine.target, concurrency=c, temperature=cfg.temperature, seed=cfg.seed,
                                           cuda_graphs=cfg.cuda_graphs, compile=cfg.compile,
                                           sync_every=cfg.sync_every, refill_at=max(1, c // cfg.refill_divisor))
    res = dec.generate(prompts, limits or req.max_new, sorted(req.eos))
    s = res.stats
    metrics = Counts(0).metrics(cfg.method, len(prompts), s.steps, s.output_tokens, s.prefill_s, s.decode_s, 0.0)
    return GenerationResult(res.tokens, metrics, [])


def may_continue(outputs: list[list[int]], done: list[bool], max_new: int) -> bool:
    """Whether a plain-decoding request may still be decoding after the step in flight.

    That step gives every unfinished request exactly one token, so a request with fewer than
    ``max_new - 1`` tokens cannot have reached its length limit by then (an EOS may still end it).
    ``generate`` queues the next step only when this holds: a run that stops at its length
    limit queues no step it throws away; one that stops at an EOS throws away at most one.
    Queuing ahead is safe for a finished request: its outputs are ignored, and writes past its
    cache block are dropped (``step.kv_slots``).

    >>> may_continue([[1, 2], [3]], [False, True], max_new=3), may_continue([[1, 2]], [False], max_new=3)
    (False, False)
    >>> may_continue([[1]], [False], max_new=3)
    True
    """
    return any(not d and len(o) + 1 < max_new for o, d in zip(outputs, done))

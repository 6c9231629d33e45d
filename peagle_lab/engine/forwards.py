"""The target's and the drafter's forwards of one engine, each chosen once: eager, compiled, or graphed.

```
Forwards.prefill(ids, positions, lengths, cache, …)  ─► logits at each prompt's last token, taps
Forwards.verify(state, cache, …)                      ─► Verified (the verify batch, target, verification)
Forwards.draft(cache, taps, ids, positions, …)        ─► K drafts per request (step.prepare_draft, step.draft)
```
Each wraps :mod:`peagle_lab.step` functions without changing what they compute. On CUDA at
temperature 0 a decode step replays three CUDA graphs: the verify part, the drafter's batch
preparation, and every drafter pass with its sampling. The forward that ``step.draft`` runs is a
:class:`~peagle_lab.engine.graphs.DrafterPass` built here once, so the step gets a forward and
never calls back into the engine.
"""
from __future__ import annotations

import torch

from .. import step
from ..config import SpecConfig
from ..drafter import Drafter
from ..drafting import DraftResult
from ..models.llama import LlamaModel
from .graphs import CudaGraphs, DrafterPass, capture_graph, compiled_forward
from .metrics import Timer
from .state import State, Verified, verified, verify_batch

__all__ = ["Forwards", "PREFILL_ALIGN", "PREFILL_GRAPH_TOKENS", "padded_prefill_width"]

PREFILL_ALIGN = 64  # padded prefill widths are a multiple of this (Forwards.prefill, StreamDecoder)
PREFILL_GRAPH_TOKENS = 16384  # SpecConfig.prefill_graphs: c × padded width at most; longer prefills stay eager


def padded_prefill_width(width: int, max_len: int) -> int:
    """``width`` rounded up to a multiple of ``PREFILL_ALIGN``, at most ``max_len``: a graphed prefill's shape.

    >>> padded_prefill_width(9, 256), padded_prefill_width(64, 256), padded_prefill_width(250, 256)
    (64, 64, 256)
    """
    return min(-(-width // PREFILL_ALIGN) * PREFILL_ALIGN, max_len)


class Forwards:
    """The forwards of an engine over ``target`` and ``drafter`` (None for plain decoding) under ``config``.

    ``use_graphs``: CUDA graphs (``SpecConfig.cuda_graphs`` on a CUDA device). ``compiled``: each decoder
    layer compiled (``SpecConfig.compile``); ``layer_fn`` is then the shared
    :class:`~peagle_lab.engine.CompiledForward`.
    ``graphs`` holds the decode step's graphs, ``prefill_graphs`` one graph per padded prompt shape.
    """

    def __init__(self, target: LlamaModel, drafter: Drafter | None, config: SpecConfig) -> None:
        self.target, self.drafter, self.config = target, drafter, config
        device = target.device
        self.use_graphs = config.cuda_graphs and device.type == "cuda"
        self.compiled = config.compile == "on" or (config.compile == "auto" and device.type == "cuda")
        self.layer_fn = compiled_forward(config.compile_edges) if self.compiled else None
        self.graphs = CudaGraphs()
        self.prefill_graphs = CudaGraphs()  # SpecConfig.prefill_graphs: one per padded prompt shape
        self.set_compile_prefill(self.compiled)

    def set_compile_prefill(self, on: bool) -> None:
        """Whether the prefill, and a first draft's passes over the prompts, run each layer compiled.

        On by default with compile: the prefill's first chunk attends through SDPA's causal kernel,
        so what a compiled layer fuses is the norms, rope and MLP elementwise work (on the H200,
        random SmolLM2 weights: ``scripts/gpu/prefill_batch_gpu.py``). Chooses the drafter's
        forwards again: ``plain`` (captured inside the whole-draft graphs), ``decode`` (a decode
        step's pass, graphed per shape on CUDA) and ``first[tag]`` (a first draft's, per cache).
        """
        self.compile_prefill = on
        self.prefill_layer_fn = self.layer_fn if on else None
        if self.drafter is None:
            return
        graphs = self.graphs if self.use_graphs else None
        self.plain = DrafterPass(self.drafter, self.layer_fn)
        self.decode = DrafterPass(self.drafter, self.layer_fn, graphs)
        self.first = {tag: DrafterPass(self.drafter, self.layer_fn, graphs, tag, first=True,
                                       prefill_layer_fn=self.prefill_layer_fn) for tag in ("batch", "admit")}

    # ------------------------------------------------------------------ prefill
    def prefill(self, ids: torch.Tensor, pos: torch.Tensor, lens: torch.Tensor, cache, max_len: int,
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
        layer_fn = self.prefill_layer_fn
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
            if self.prefill_graphs.pool is None:
                self.prefill_graphs.pool = torch.cuda.graph_pool_handle()  # one pool for every shape
            logits, tap = self.prefill_graphs.run(("prefill", tag, c, tb, max_len, taps), fn, ids, lens)
        else:
            logits, tap = fn(ids, lens)
        if self.config.first_draft_graphs:
            return step.TargetOutput(logits, tap, None), ids, torch.arange(tb, device=ids.device).expand(c, tb), True
        return step.TargetOutput(logits, tap[:, :T] if taps else None, None), ids[:, :T], pos, False

    # ------------------------------------------------------------------ verify
    def verify(self, st: State, cache, max_len: int, gen) -> Verified:
        """The target over the bonus token and the drafts, then verification: one graph on CUDA.

        At temperature 0 the whole part (the verify batch, the target, greedy verification and
        the next state) replays as one CUDA graph whose inputs are the state's four tensors, so
        the host launches one graph a step instead of a dozen small kernels; with sampling the
        target alone is graphed (the verifier draws from a generator). Idle rows run at positions
        0..K (``state.verify_batch``), so their attention reads K + 1 keys, not their last request's.
        """
        cfg = self.config

        def part(nxt, start, active, *drafts):
            d = drafts[0] if drafts else None
            vids, vpos, vslots = verify_batch(nxt, d, start, max_len, active)
            logits, taps = step.target_step(self.target, cache, vids, vpos, vslots, taps=cfg.k > 0,
                                            layer_fn=self.layer_fn)
            pending = None if d is None else DraftResult(d, None, 0, None)
            return verified(logits, taps, vids, vpos, pending, start, active, 0.0, None, cfg.kernel_backend)

        if self.use_graphs and cfg.temperature == 0:
            args = (st.nxt, st.start, st.active) + (() if st.draft is None else (st.draft.tokens,))
            return self.graphs.run(("verify", tuple(args[-1].shape), max_len), part, *args)
        vids, vpos, vslots = verify_batch(st.nxt, None if st.draft is None else st.draft.tokens, st.start, max_len,
                                          st.active)
        logits, taps = self._target(vids, vpos, vslots, cache)
        return verified(logits, taps, vids, vpos, st.draft, st.start, st.active, cfg.temperature, gen,
                        cfg.kernel_backend)

    def _target(self, ids, pos, slots, cache):
        def fn(ids, pos, slots):
            return step.target_step(self.target, cache, ids, pos, slots, taps=self.config.k > 0,
                                    layer_fn=self.layer_fn)
        if self.use_graphs:
            return self.graphs.run(("target", tuple(ids.shape)), fn, ids, pos, slots)
        return fn(ids, pos, slots)

    # ------------------------------------------------------------------ draft
    def draft(self, cache, taps, ids, pos, n, bonus, max_len: int, gen, timer: Timer | None = None,
              graph_first: bool = False, tag: str = "batch", first: bool = False):
        """``step.prepare_draft`` (timed as "prep") then ``step.draft``; returns (result, marks).

        On CUDA at temperature 0, decode steps replay two graphs (prep, then every drafter
        pass with its argmax), so both methods pay no per-kernel launch cost. A first draft after a
        padded prefill is graphed the same way (``graph_first``); one after a prefill over the graph
        cap runs its first pass with compiled layers and EAGLE-3's later passes as graphs
        (``first[tag]``). ``first``: a first draft, after a prefill into cache blocks that
        hold nothing older, so its first pass attends causally over its own keys
        (``Drafter.forward(fresh=True)``) rather than over the whole block through a mask.
        """
        cfg, args = self.config, (taps, ids, pos, n, bonus)
        decode = ids.shape[1] == cfg.k + 1  # decode-step shapes are worth a graph, and a padded first draft
        if self.use_graphs and cfg.temperature == 0 and (decode or graph_first):
            key = ("first-draft" if first else "draft", tag, tuple(ids.shape))
            return self._graphed_draft(key, cache, args, max_len, first, timer)
        m0 = timer.mark() if timer else None
        batch = self._prepare(*args, max_len)
        m1 = timer.mark() if timer else None
        forward = self.decode if decode and not first else self.first[tag]
        res = self._draft(cache, args, max_len, gen, batch, forward, first)
        return res, (m0, m1, timer.mark() if timer else None)

    def _prepare(self, taps, ids, pos, n, bonus, max_len: int):
        cfg = self.config
        return step.prepare_draft(self.drafter, taps, ids, pos, n, bonus, cfg.k, max_len, cfg.kernel_backend)

    def _draft(self, cache, args, max_len: int, gen, batch, forward: DrafterPass, fresh: bool) -> DraftResult:
        cfg = self.config
        return step.draft(self.drafter, cache, *args, k=cfg.k, max_len=max_len, temperature=cfg.temperature,
                          generator=gen, backend=cfg.kernel_backend, batch=batch, forward=forward, fresh=fresh)

    def _graphed_draft(self, key, cache, args, max_len: int, first: bool, timer: Timer | None):
        """The draft as two CUDA graphs (prep, then every pass with its argmax), captured once per ``key``."""
        def make():
            static = [a.clone() for a in args]
            g_prep, batch = capture_graph(lambda: self._prepare(*static, max_len))
            g_prep.replay()  # captured outputs hold nothing until a replay; the draft warm-up reads them
            g_draft, res = capture_graph(lambda: self._draft(cache, static, max_len, None, batch, self.plain, first))
            return g_prep, g_draft, static, res

        g_prep, g_draft, static, res = self.graphs.capture(key, make)
        for s_, a in zip(static, args):
            s_.copy_(a)
        m0 = timer.mark() if timer else None
        g_prep.replay()
        m1 = timer.mark() if timer else None
        g_draft.replay()
        m2 = timer.mark() if timer else None
        return res, (m0, m1, m2)

"""CUDA graphs and compiled forwards: how the engine makes a step's many small kernels cheap to launch.

```
compiled(fn)                 torch.compile once per process (symbolic sizes, combo kernels)
CompiledForward              the layer_fn of every forward: each decoder layer compiled, and its edges
CudaGraphs.run(key, fn, *x)  a CUDA graph per input shape; a replay copies x into static buffers
DrafterPass                  one drafter forward for step.draft: eager, or a graph per shape on CUDA
decode_attention_fn          the decode steps' attention kernel (SpecConfig.decode_attention)
```
Nothing here knows the decode loop: the loop (``engine.loop``) and the forwards it calls
(``engine.forwards``) choose among these once, when an engine is built.
"""
from __future__ import annotations

import functools
import time

import torch

from ..drafter import Drafter
from ..drafting import run_drafter
from ..kernels.backend import resolve as resolve_backend
from ..models.llama import call_layer, forward_epilogue, forward_prologue

__all__ = ["capture_graph", "CudaGraphs", "COMBO_KERNELS", "compiled", "CompiledForward", "compiled_forward",
           "decode_attention_fn", "DrafterPass"]


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
    (``docs/results/h200/verify_profile/2026-12-03-cdfd42a/combo_kernels.json``). The CPU tests compile with it on
    (inductor's C++ backend), and the outputs stay exact. ``COMBO_KERNELS = False`` before the
    first engine turns it off (``scripts/gpu/verify_profile_gpu.py --no-combo-kernels``).
    """
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):  # the 0/1 specialisations of c, T, rows
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
    return torch.compile(fn, fullgraph=True, dynamic=True, options={"combo_kernels": COMBO_KERNELS})


class CompiledForward:
    """The engine's ``layer_fn``: each decoder layer compiled (:func:`~peagle_lab.engine.graphs.compiled`
    of ``call_layer``), and with ``edges`` the work around the layers too.

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
    """The :class:`~peagle_lab.engine.CompiledForward` of every engine in this process (its code is shared)."""
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
    from ..kernels import decode_attention as kernels

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



class DrafterPass:
    """One drafter forward as ``step.draft`` calls it: ``(cache, ids, hidden, pos, slots, rows, fresh=False)``.

    Built once per engine, so the step receives a forward and never calls back into the loop:

    - ``layer_fn`` runs each decoder layer (the compiled one, or None: eager);
    - with ``graphs`` (CUDA), a pass replays one CUDA graph per shape, keyed by ``tag``: the cache
      it writes ("batch": the main one, "admit": the scratch cache of continuous batching);
    - ``first``: the forward of a first draft, after a prefill. Its passes that span the prompts run
      eagerly with ``prefill_layer_fn`` (the prefill's layer function: ``SpecDecoder.compile_prefill``),
      as the prefill does; only its one-token passes (EAGLE-3's later ones) replay graphs.
    """

    def __init__(self, drafter: Drafter, layer_fn=None, graphs: CudaGraphs | None = None, tag: str = "batch", *,
                 first: bool = False, prefill_layer_fn=None) -> None:
        self.drafter, self.layer_fn, self.graphs, self.tag = drafter, layer_fn, graphs, tag
        self.first, self.prefill_layer_fn = first, prefill_layer_fn

    def __call__(self, cache, ids, hidden, pos, slots, rows, fresh: bool = False):
        if self.graphs is not None and (not self.first or (ids.shape[1] == 1 and rows is None)):
            return self._replay(cache, ids, hidden, pos, slots, rows)
        layer_fn = self.prefill_layer_fn if self.first else self.layer_fn
        return run_drafter(self.drafter, cache, ids, hidden, pos, slots, rows, layer_fn, fresh=fresh)

    def _replay(self, cache, ids, hidden, pos, slots, rows):
        """The pass as a CUDA graph. A graph reads the cache, so ``fresh`` (which only lets a first draft
        skip reading it) is not needed: the result is the same."""
        def fn(ids, hidden, pos, slots, *rows):
            return run_drafter(self.drafter, cache, ids, hidden, pos, slots, rows[0] if rows else None, self.layer_fn)
        extra = (rows,) if rows is not None else ()
        key = ("drafter", self.tag, tuple(ids.shape), None if rows is None else tuple(rows.shape))
        return self.graphs.run(key, fn, ids, hidden, pos, slots, *extra)

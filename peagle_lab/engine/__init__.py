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

The step itself is :mod:`peagle_lab.step` (plain functions); this package adds what a serving
loop needs around it: KV caches kept across calls (``reserve``), CUDA graphs of the verify part
and the drafter, timing without host syncs, and vLLM's counters.

``generate(prompts, concurrency=c)`` with more prompts than ``c`` batches continuously: a
request that finishes frees its row, and once about ``c / refill_divisor`` rows are free
(``SpecConfig``, default 4; or once none is busy) the next prompts are prefilled, and their
first drafts made, in a scratch cache whose blocks are then copied into the free rows' blocks;
the other rows keep their state. A static batch runs until its slowest request is done, so a
speculative batch keeps only part of its row-steps busy (``bench.analysis.rows_busy`` measures
the share; docs/engine.md).

One module a job, each importing only those below it:

    loop       SpecDecoder: prefill, then the loop of verify / draft / accept; continuous batching's loop
    plain      bulk plain decoding with the loop on the device (StreamDecoder; SpecConfig.device_loop)
    batching   continuous batching's one Scheduler (both loops'), KV caches, admission, compaction, KV moves
    forwards   the target's and the drafter's forwards, each chosen once: eager, compiled or graphed
    graphs     CUDA graphs, compiled layers, the drafter pass step.draft receives, decode attention
    state      what the loop carries on the device between steps, and the host's read of it
    metrics    vLLM's counters, Metrics, StepTrace (with the contexts a step attends to), GenerationResult, the timer
    checks     a generate call's input checks
    sampling   Gumbel-max sampling with hashed noise (no generator state: the device loop's)
"""
from .batching import KV_BLOCK_ALIGN, copy_kv_blocks, move_kv_blocks
from .checks import check_eos, check_prompts
from .forwards import PREFILL_ALIGN, PREFILL_GRAPH_TOKENS, padded_prefill_width
from .graphs import CompiledForward, CudaGraphs, capture_graph, compiled, compiled_forward, decode_attention_fn
from .loop import SpecDecoder
from .metrics import GenerationResult, Metrics, StepTrace, Timer, context_summary

# The public classes belong to the package, where users import them and the API reference
# documents them (their code stays in the module of its job).
for _public in (SpecDecoder, GenerationResult, Metrics, StepTrace, CompiledForward):
    _public.__module__ = __name__
del _public

__all__ = ["SpecDecoder", "GenerationResult", "Metrics", "StepTrace", "Timer", "CudaGraphs", "capture_graph",
           "compiled", "CompiledForward", "compiled_forward", "decode_attention_fn", "copy_kv_blocks",
           "move_kv_blocks", "check_prompts", "check_eos", "padded_prefill_width", "KV_BLOCK_ALIGN",
           "PREFILL_ALIGN", "PREFILL_GRAPH_TOKENS", "context_summary"]

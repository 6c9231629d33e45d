"""One timer for a piece of GPU work as the engine runs it: captured once in a CUDA graph, then replayed.

The engine replays CUDA graphs, so a layer's or a kernel's cost in a decode step is what one replay
of it costs, without the launch overhead of calling it eagerly. ``replay_ms`` measures exactly that:

```
warm-up on a side stream (allocator, lazy init, compilation) ─► capture fn() in one graph
  ─► one untimed replay ─► reps × (event ─► replay ─► event) ─► median
```

On a CPU there is nothing to capture: the same function times plain calls (one untimed first), so a
CPU rehearsal runs the same code path. Both scale-lab parts (``scale_moe``) and the decode-attention
script (``scripts/gpu/decode_attention_gpu.py``) time with it.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from ..engine.graphs import capture_graph

__all__ = ["replay_ms"]


def replay_ms(fn: Callable[[], object], device: torch.device | str, reps: int = 20) -> float:
    """Median milliseconds of one ``fn()``: a replay of its CUDA graph on CUDA, a plain call elsewhere.

    Args:
        fn: the work, with every input static (a graph replays the same addresses); to time several calls
            as one graph, pass a function that makes them all and divide by their number.
        device: where ``fn`` runs.
        reps: timed replays (or calls); the median is returned.

    Raises:
        ValueError: ``reps`` < 1.

    >>> x = torch.ones(4)
    >>> replay_ms(lambda: x.add_(1), "cpu", reps=3) >= 0.0, x[0].item()  # 1 untimed + 3 timed calls
    (True, 5.0)
    """
    if reps < 1:
        raise ValueError(f"reps={reps!r}: expected at least 1 timed run")
    if torch.device(device).type != "cuda":
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)
    graph, _ = capture_graph(fn)
    graph.replay()  # the first replay pays one-off costs (pages, clocks)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del graph
    return statistics.median(times)

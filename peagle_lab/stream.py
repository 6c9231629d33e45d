"""``StreamDecoder``: plain decoding with continuous batching, for making data in bulk.

``SpecDecoder.generate`` decodes a fixed batch: a request that ends early keeps its row until
the longest one ends, and the host reads the new tokens after every step. Generating training
data that way (chunks of 1024 prompts, up to 320 tokens each) leaves many rows idle, since
responses vary widely in length (``docs/results/history.md`` has the measurement).
``StreamDecoder`` keeps ``concurrency`` rows busy instead, and keeps the loop on the device:

```
device state, one entry per row: token, position, active, count, limit, out [c, max_new]
step (one CUDA graph): target([c, 1]) ─► next token ─► out[row, count] where active;
      count + 1; EOS or count = limit ─► inactive                 (no host read)
every sync_every steps the host reads active [c]: finished rows' tokens come back, and once
      refill_at rows are free the next prompts are prefilled into them
```

This module is where users import it; the decoder is the engine's one implementation of bulk
plain decoding (:mod:`peagle_lab.engine.plain`), admitting through the engine's continuous-batching
``Scheduler``. ``SpecDecoder(target, None, SpecConfig(method="baseline", device_loop=True))``
runs the same loop from ``generate(prompts, concurrency=c)``. The sampling helpers come from
:mod:`peagle_lab.engine.sampling`.
"""
from __future__ import annotations

from .engine.plain import EOS_SLOTS, StreamDecoder, StreamResult, StreamStats
from .engine.sampling import gumbel_pick, sampling_uniforms, token_hashes

# Users import these here, where the API reference documents them (their code is the engine's).
for _public in (StreamDecoder, StreamResult, StreamStats):
    _public.__module__ = __name__
del _public

__all__ = ["StreamDecoder", "StreamResult", "StreamStats", "sampling_uniforms", "gumbel_pick", "token_hashes",
           "EOS_SLOTS"]

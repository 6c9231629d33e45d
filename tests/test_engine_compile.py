"""The compiled decode step (SpecConfig.compile): lossless, and compiled a bounded number of times.

On CUDA the engine compiles by default; here, on a CPU, ``compile="on"`` runs the same
compiled step functions through inductor's C++ backend, so the lossless property is checked
on the compiled code path wherever the suite runs.
"""
from __future__ import annotations

import pytest
import torch

from peagle_lab import step
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder, compiled
from peagle_lab.models.llama import call_layer, forward_epilogue, forward_prologue
from peagle_lab.testing import tiny_drafter, tiny_target

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [3, 1, 4, 1, 5, 9, 2, 6, 5], [42]]
pytestmark = pytest.mark.slow


def run(target, drafter, method, k, prompts, mode):
    cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=16, compile=mode)
    engine = SpecDecoder(target, drafter, cfg)
    assert engine.compiled == (mode == "on")
    return engine.generate(prompts).tokens


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def test_compiled_step_is_lossless_and_sizes_stay_symbolic(target):
    heads = {m: tiny_drafter(target, m, seed=3) for m in ("eagle3", "peagle")}
    base = {c: run(target, None, "baseline", 1, PROMPTS[:c], "off") for c in (1, 3, 4)}
    for c in (1, 4):  # c = 1 and c > 1 are separate specialisations (dynamo's 0/1 rule)
        assert run(target, None, "baseline", 1, PROMPTS[:c], "on") == base[c]
        for method, head in heads.items():
            assert run(target, head, method, 3, PROMPTS[:c], "on") == base[c], (method, c)
    # New batch sizes, K values and cache sizes reuse what is compiled: no recompilation.
    before = _graphs_compiled()
    for method, head in heads.items():
        assert run(target, head, method, 5, PROMPTS[:3], "on") == base[3], method
    assert _graphs_compiled() == before


def test_compiled_functions_are_shared_by_every_engine(target):
    assert compiled(call_layer) is compiled(call_layer)
    a = SpecDecoder(target, None, SpecConfig(method="baseline", compile="on"))
    b = SpecDecoder(target, None, SpecConfig(method="baseline", compile="on"))
    assert a._layer_fn is b._layer_fn
    assert a._layer_fn.layer is compiled(call_layer)
    assert a._layer_fn.prologue is compiled(forward_prologue) and a._layer_fn.epilogue is compiled(forward_epilogue)
    c = SpecDecoder(target, None, SpecConfig(method="baseline", compile="on", compile_edges=False))
    assert c._layer_fn.layer is compiled(call_layer) and c._layer_fn.prologue is c._layer_fn.epilogue is None
    assert SpecDecoder(target, None, SpecConfig(method="baseline")).compiled is False  # auto: off on a CPU


def test_chunked_prefill_matches_one_pass(target):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [3, 1, 4], [2, 7, 1, 8, 2, 8, 1, 8, 2]]
    ids, pos, lens = step.pad_prompts(prompts, torch.device("cpu"))
    outs, caches = [], []
    for chunk in (10_000, 6, 3):  # one pass; widths 2 and 1 (c = 3)
        cache = target.allocate_cache(3, 16)
        with torch.inference_mode():
            outs.append(step.prefill(target, ids, pos, lens, cache, 16, chunk_tokens=chunk))
        caches.append(cache)
    real = pos < lens[:, None]  # padding rows compute garbage that nothing reads
    for out, cache in zip(outs[1:], caches[1:]):
        torch.testing.assert_close(out.logits, outs[0].logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.taps[real], outs[0].taps[real], rtol=1e-4, atol=1e-5)
        assert out.logits.argmax(-1).tolist() == outs[0].logits.argmax(-1).tolist()
        for layer in range(len(cache.k)):
            live = step.kv_slots(pos, pos < lens[:, None], 16).reshape(-1)
            live = live[live >= 0]
            torch.testing.assert_close(cache.k[layer][live], caches[0].k[layer][live], rtol=1e-5, atol=1e-5)

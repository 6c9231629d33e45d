"""StreamDecoder: continuous batching returns what plain decoding returns, request by request."""
import random

import pytest
import torch

from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.models.kv_cache import KVCache
from peagle_lab.stream import StreamDecoder
from peagle_lab.testing import tiny_target

EOS = (2, *range(40, 56))  # a sixth of the vocabulary ends a request: rows finish at scattered steps


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 96) for _ in range(rng.randrange(1, 14))] for _ in range(n)]


def _plain(target, prompts, max_new, eos=EOS):
    eng = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=max(max_new)))
    return [eng.generate([p], max_new_tokens=m, eos_token_ids=eos).tokens[0] for p, m in zip(prompts, max_new)]


@pytest.mark.parametrize("c,sync_every,refill_at,n", [(3, 1, 1, 23), (4, 3, 2, 23), (16, 2, None, 23), (5, 7, 5, 23),
                                                       (32, 2, 3, 90)])  # the last admits 3..8 rows, padded to 4 or 8
def test_greedy_equals_plain_decoding_with_refills(c, sync_every, refill_at, n):
    target = tiny_target()
    prompts = _prompts(n)
    max_new = [random.Random(i).randrange(1, 20) for i in range(n)]
    dec = StreamDecoder(target, concurrency=c, sync_every=sync_every, refill_at=refill_at, bucket_factor=2)
    res = dec.generate(prompts, max_new, EOS)
    assert res.tokens == _plain(target, prompts, max_new)
    s = res.stats
    assert s.requests == n and s.output_tokens == sum(len(t) for t in res.tokens)
    assert s.prefills >= -(-n // c) and s.buckets >= 1
    # every row-step that made no token is a row waiting for the next read, never more than sync_every - 1
    assert s.decode_tokens <= s.row_steps <= s.decode_tokens + s.requests * sync_every
    assert any(t[-1] in EOS for t in res.tokens) and any(t[-1] not in EOS for t in res.tokens)


def test_buckets_size_the_block_for_their_longest_prompt_and_keep_order():
    target = tiny_target()
    prompts = [[5] * n for n in (30, 2, 3, 60, 4, 2, 5, 7)]
    dec = StreamDecoder(target, concurrency=2, bucket_factor=1)
    buckets = dec._buckets([len(p) for p in prompts], [8] * 8)
    assert [sorted(len(prompts[q]) for q in reqs) for _, reqs in buckets] == [[2, 2], [3, 4], [5, 7], [30, 60]]
    assert [L for L, _ in buckets] == [64, 64, 64, 128]  # aligned to 64 positions
    res = dec.generate(prompts, 8, EOS)
    assert res.tokens == _plain(target, prompts, [8] * 8) and res.stats.buckets == 4


def test_caches_and_state_are_reused_across_calls():
    target = tiny_target()
    dec = StreamDecoder(target, concurrency=4)
    first = dec.generate(_prompts(9, 1), 12, EOS)
    again = dec.generate(_prompts(9, 1), 12, (2,))  # other EOS ids: the device state takes them in place
    assert dec.cache_allocations == 1
    assert first.tokens == _plain(target, _prompts(9, 1), [12] * 9)
    assert again.tokens == _plain(target, _prompts(9, 1), [12] * 9, eos=(2,))


def test_admit_stops_new_requests_and_in_flight_ones_finish():
    target = tiny_target()
    calls, seen = [], []
    dec = StreamDecoder(target, concurrency=3, refill_at=1, bucket_factor=100)

    def admit():
        calls.append(1)
        return len(calls) <= 2  # the first fill and one refill
    res = dec.generate(_prompts(12), 10, EOS, admit=admit, on_result=lambda q, t: seen.append((q, t)))
    got = [q for q, t in enumerate(res.tokens) if t is not None]
    assert 3 < len(got) < 12 and res.stats.requests == len(got)
    assert sorted(seen) == [(q, res.tokens[q]) for q in got]
    ref = _plain(target, [_prompts(12)[q] for q in got], [10] * len(got))
    assert [res.tokens[q] for q in got] == ref


def test_sampling_is_seeded_and_does_not_depend_on_the_batch():
    target = tiny_target()
    prompts = _prompts(10)

    def sample(c, seed, **kw):
        return StreamDecoder(target, concurrency=c, temperature=0.9, seed=seed, **kw).generate(prompts, 12, EOS).tokens
    a = sample(4, 3)
    assert a == sample(4, 3) == sample(2, 3) == sample(7, 3, sync_every=3)  # noise keyed by (seed, prompt, position)
    assert a != sample(4, 4)
    assert a != _plain(target, prompts, [12] * 10)  # sampled, not greedy


def test_gumbel_pick_samples_the_softmax():
    from peagle_lab.stream import gumbel_pick

    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5]).expand(40000, -1)
    t = torch.tensor(0.7)
    picks = gumbel_pick(logits, t, torch.tensor(11), torch.arange(40000) % 97, torch.arange(40000) // 97)
    freq = torch.bincount(picks, minlength=5).float() / 40000
    assert torch.allclose(freq, torch.softmax(logits[0] / 0.7, -1), atol=0.01)


def test_sampling_uniforms_are_a_function_of_their_inputs():
    from peagle_lab.stream import sampling_uniforms, token_hashes

    keys, pos, tok = torch.tensor([0, 1, 0]), torch.tensor([5, 5, 6]), token_hashes(1000)
    u = sampling_uniforms(torch.tensor(3), keys, pos, tok)
    assert torch.equal(u, sampling_uniforms(torch.tensor(3), keys, pos, tok))
    assert not torch.equal(u, sampling_uniforms(torch.tensor(4), keys, pos, tok))
    assert (u[0] != u[1]).float().mean() > 0.99 and (u[0] != u[2]).float().mean() > 0.99
    assert 0.45 < float(u.mean()) < 0.55 and float(u.min()) > 0 and float(u.max()) < 1


@pytest.mark.parametrize("kw,word", [
    (dict(concurrency=0), "concurrency"), (dict(sync_every=0), "sync_every"), (dict(temperature=-1.0), "temperature"),
    (dict(compile="maybe"), "compile"), (dict(refill_at=9, concurrency=4), "refill_at"),
])
def test_bad_settings_name_the_value(kw, word):
    with pytest.raises(ValueError, match=word):
        StreamDecoder(tiny_target(), **kw)


@pytest.mark.parametrize("prompts,max_new,word", [
    ([], 4, "prompt"), ([[5, 6]], 0, "max_new_tokens"), ([[5, 6]], [3, 4], "entries"),
    ([[5, 999]], 4, "outside"), ([[5] * 1000], 100, "context"),
])
def test_bad_requests_name_the_value(prompts, max_new, word):
    with pytest.raises(ValueError, match=word):
        StreamDecoder(tiny_target(), concurrency=2).generate(prompts, max_new)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_graphed_decoding_equals_eager_on_cuda(temperature):
    target = tiny_target().cuda()
    prompts = _prompts(40)
    kw = dict(concurrency=8, sync_every=3, temperature=temperature, seed=5)
    graphed = StreamDecoder(target, **kw).generate(prompts, 16, EOS)
    eager = StreamDecoder(target, cuda_graphs=False, **kw).generate(prompts, 16, EOS)
    assert graphed.tokens == eager.tokens
    s = graphed.stats  # each capture is counted inside the timer it ran under, so a step's time stays positive
    assert 0 < s.warmup_s < s.decode_s and s.prefill_warmup_s > 0


def test_every_forward_reads_key_positions_that_the_decoders_caches_own(monkeypatch):
    # The step and prefill graphs are captured through one view of a cache and replayed for later views, so
    # nothing they read may belong to a view alone: at 27c3bc5 each view made its own arange of key positions,
    # freed with the view, and the data generator's greedy phase hit an illegal memory access on the H200.
    target = tiny_target()
    prompts = [[5] * n for n in (3, 70, 4, 2, 90, 6, 5, 7, 3, 4, 2)]  # two block lengths, refills through scratch
    want = _plain(target, prompts, [12] * len(prompts))
    seen = []
    real = KVCache.key_positions

    def spy(cache):
        out = real(cache)
        seen.append(out.data_ptr())
        return out
    monkeypatch.setattr(KVCache, "key_positions", spy)
    dec = StreamDecoder(target, concurrency=4, refill_at=1, bucket_factor=1)
    res = dec.generate(prompts, 12, EOS)
    assert res.tokens == want and res.stats.buckets == 2
    owned = {real(c).data_ptr() for c in (dec._cache, dec._scratch) if c is not None}
    assert seen and set(seen) <= owned


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_graph_stays_valid_for_later_views_of_its_block_on_cuda():
    # each call lays the cache out as fresh views and replays the graphs captured through the first call's;
    # the tokens stay eager's after the allocator's cache is emptied between calls
    target = tiny_target().cuda()
    graphed, eager = StreamDecoder(target, concurrency=8, sync_every=3), StreamDecoder(target, concurrency=8,
                                                                                      cuda_graphs=False)
    for seed in range(3):
        prompts = _prompts(24, seed)
        got = graphed.generate(prompts, 16, EOS).tokens
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # memory freed with the last view goes back to the driver
        junk = [torch.full((n,), 1 << 40, dtype=torch.long, device="cuda") for n in (64, 128, 512) for _ in range(64)]
        assert got == eager.generate(prompts, 16, EOS).tokens
        del junk


# ---------------------------------------------------------------- through SpecDecoder (SpecConfig.device_loop)
def _device_engine(target, max_new: int, **kw) -> SpecDecoder:
    return SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=max_new, device_loop=True, **kw))


@pytest.mark.parametrize("c,sync_every,divisor,n", [(3, 1, 3, 23), (4, 3, 2, 23), (16, 2, 16, 23), (32, 2, 8, 90)])
def test_the_engines_device_loop_is_stream_decoding(c, sync_every, divisor, n):
    """``SpecDecoder.generate(..., concurrency=c)`` with ``device_loop``: the StreamDecoder loop, its greedy tokens
    plain decoding's, its metrics counted from the device loop's steps."""
    target = tiny_target()
    prompts = _prompts(n)
    eng = _device_engine(target, 12, sync_every=sync_every, refill_divisor=divisor)
    res = eng.generate(prompts, eos_token_ids=EOS, concurrency=c)
    want = _plain(target, prompts, [12] * n)
    assert res.tokens == want
    assert isinstance(eng.plain, StreamDecoder) and eng.plain.c == c and eng.plain.refill_at == max(1, c // divisor)
    direct = StreamDecoder(target, concurrency=c, sync_every=sync_every, refill_at=eng.plain.refill_at)
    assert direct.generate(prompts, 12, EOS).tokens == want
    m = res.metrics
    assert (m.method, m.k, m.num_requests, m.output_tokens) == ("baseline", 0, n, sum(map(len, want)))
    assert m.num_steps > 0 and m.num_steps % sync_every == 0 and res.trace == []
    assert m.num_drafts == 0 and m.first_draft_s == 0.0 and m.prefill_s > 0
    decoder = eng.plain
    assert eng.generate(prompts[::-1], eos_token_ids=EOS, concurrency=c).tokens == want[::-1]
    assert eng.plain is decoder and decoder.cache_allocations == 1  # caches and graphs kept across calls


def test_the_device_loop_samples_as_stream_decoding_does():
    target = tiny_target()
    prompts = _prompts(10)
    got = _device_engine(target, 12, temperature=0.9, seed=3).generate(prompts, eos_token_ids=EOS, concurrency=4)
    want = StreamDecoder(target, concurrency=4, temperature=0.9, seed=3, refill_at=1).generate(prompts, 12, EOS)
    assert got.tokens == want.tokens and got.tokens != _plain(target, prompts, [12] * 10)


def test_the_host_read_loop_stays_where_the_device_loop_does_not_apply():
    """Off by default (a step trace, one entry a step); one batch, and a drafter's method, keep the host loop."""
    from peagle_lab.testing import tiny_drafter

    target = tiny_target()
    prompts = _prompts(9)
    want = _plain(target, prompts, [10] * 9)
    host = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=10))
    r = host.generate(prompts, eos_token_ids=EOS, concurrency=3)
    assert r.tokens == want and len(r.trace) == r.metrics.num_steps > 0 and host.plain is None
    one_batch = _device_engine(target, 10)
    assert one_batch.generate(prompts, eos_token_ids=EOS, concurrency=9).tokens == want and one_batch.plain is None
    spec = SpecDecoder(target, tiny_drafter(target, "peagle"), SpecConfig(max_new_tokens=10, device_loop=True))
    r = spec.generate(prompts, eos_token_ids=EOS, concurrency=3)
    assert r.tokens == want and spec.plain is None and r.metrics.num_drafts > 0


def test_the_device_loop_takes_one_limit_per_prompt():
    target = tiny_target()
    prompts = _prompts(11)
    max_new = [random.Random(i).randrange(1, 20) for i in range(11)]
    eng = _device_engine(target, 4)
    assert eng.generate(prompts, max_new, EOS, concurrency=3).tokens == _plain(target, prompts, max_new)
    with pytest.raises(ValueError, match="entries"):
        eng.generate(prompts, max_new[:3], EOS, concurrency=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        eng.generate(prompts, [0] * 11, EOS, concurrency=3)


@pytest.mark.parametrize("kw,word", [(dict(device_loop=1), "device_loop"), (dict(sync_every=0), "sync_every"),
                                     (dict(sync_every=5000), "sync_every")])
def test_bad_device_loop_settings_name_the_value(kw, word):
    with pytest.raises(ValueError, match=word):
        SpecConfig(method="baseline", **kw)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_engines_device_loop_equals_its_host_loop_on_cuda():
    """Graphed and compiled on CUDA, the engine's device loop gives the host-read loop's greedy tokens."""
    target = tiny_target().cuda()
    prompts = _prompts(40)
    host = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=16))
    device = _device_engine(target, 16, sync_every=3)
    want = host.generate(prompts, eos_token_ids=EOS, concurrency=8).tokens
    for _ in range(2):  # the second call replays the captured graphs
        res = device.generate(prompts, eos_token_ids=EOS, concurrency=8)
        assert res.tokens == want and res.trace == [] and res.metrics.num_steps % 3 == 0


def test_the_benchmark_rehearses_both_paths_on_a_cpu(tmp_path):
    """``scripts/gpu/stream_bench_gpu.py --device cpu --tiny``: StreamDecoder and the engine's device loop on the
    same prompts, the same tokens, one JSON with its provenance."""
    import json

    from peagle_lab.testing import script_module

    bench = script_module("gpu/stream_bench_gpu.py")
    out = tmp_path / "bench.json"
    assert bench.main(["--device", "cpu", "--tiny", "-c", "8", "--prompts", "40", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["commit"] and doc["device"] and "stream_bench_gpu.py" in doc["command"]
    assert sorted((r["path"], r["repeat"]) for r in doc["rows"]) == [("engine", 0), ("engine", 1), ("stream", 0),
                                                                    ("stream", 1)]
    assert all(r["requests"] == 40 and r["tokens_per_s"] > 0 for r in doc["rows"])
    assert doc["summary"]["tokens_equal@T=0.0"] == {"stream": True, "engine": True}
    assert doc["summary"]["engine_over_stream@T=0.0"] > 0

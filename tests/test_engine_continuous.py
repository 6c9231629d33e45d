"""Continuous batching (``SpecDecoder.generate(..., concurrency=c)``): lossless, counted like a static batch,
and rows refilled as requests finish."""
from __future__ import annotations

import random

import pytest

from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.testing import tiny_drafter, tiny_target

MAX_NEW = 30


def _prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randrange(1, 14))] for _ in range(n)]


def _engine(target, method: str, k: int = 3, **kw) -> SpecDecoder:
    drafter = None if method == "baseline" else tiny_drafter(target, method, seed=k)
    return SpecDecoder(target, drafter, SpecConfig(method=method, num_speculative_tokens=k,
                                                   max_new_tokens=kw.pop("max_new_tokens", MAX_NEW), **kw))


@pytest.fixture(scope="module")
def small_vocab():
    """A 6-token vocabulary: random drafters are often right, so acceptance paths run."""
    target = tiny_target(seed=2, vocab_size=6, eos_token_id=None)
    prompts = _prompts(9, 6)
    greedy = [_engine(target, "baseline").generate([p]).tokens[0] for p in prompts]
    return target, prompts, greedy


@pytest.mark.parametrize("method", ["baseline", "eagle3", "peagle"])
@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("c", [1, 2, 4])
def test_continuous_batching_is_lossless_and_counts_what_one_batch_counts(small_vocab, method, k, c):
    target, prompts, greedy = small_vocab
    static = _engine(target, method, k).generate(prompts)
    got = _engine(target, method, k).generate(prompts, concurrency=c)
    assert got.tokens == greedy == static.tokens
    m, s = got.metrics, static.metrics
    # each request drafts and accepts what it would beside any other requests
    assert (m.num_drafts, m.num_accepted_tokens, m.accepted_per_position) == \
        (s.num_drafts, s.num_accepted_tokens, s.accepted_per_position)
    assert m.num_requests == len(prompts) and m.output_tokens == sum(map(len, greedy))
    if method != "baseline":
        assert m.num_accepted_tokens > 0  # the acceptance path really ran
    assert all(len(t.num_accepted) <= c for t in got.trace)  # never more than c requests decoding


@pytest.mark.parametrize("concurrency", [None, 2])
def test_the_first_drafts_time_is_split_out_of_the_prefill(small_vocab, concurrency):
    """``first_draft_s``: the first drafts' share of ``prefill_s`` (0 without a drafter), one batch or continuous."""
    target, prompts, _ = small_vocab
    for method in ("baseline", "peagle"):
        m = _engine(target, method).generate(prompts, concurrency=concurrency).metrics
        if method == "baseline":
            assert m.first_draft_s == 0.0
        else:
            assert 0.0 < m.first_draft_s < m.prefill_s


def test_rows_are_refilled_so_fewer_steps_run_than_batch_after_batch():
    """c = 2, some requests end after a few tokens (an EOS), others run to the limit: batch after batch,
    a short request's row idles until its partner is done; continuously, it takes the next prompt."""
    target = tiny_target(seed=4, eos_token_id=None)
    engine = _engine(target, "peagle", 3, max_new_tokens=40)
    prompts = _prompts(8, 96, seed=3)
    free_run = [_engine(target, "baseline", max_new_tokens=40).generate([p], eos_token_ids=()).tokens[0]
                for p in prompts]
    eos = tuple({free_run[i][2] for i in range(0, 8, 2)})  # the even requests' third token
    want = [_engine(target, "baseline", max_new_tokens=40).generate([p], eos_token_ids=eos).tokens[0]
            for p in prompts]
    assert min(map(len, want)) <= 3 and max(map(len, want)) == 40  # short and long requests mixed
    batches = sum(engine.generate(prompts[i:i + 2], eos_token_ids=eos).metrics.num_steps for i in range(0, 8, 2))
    cont = engine.generate(prompts, eos_token_ids=eos, concurrency=2)
    assert cont.tokens == want
    assert cont.metrics.num_steps < batches


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_requests_that_end_at_their_first_token_free_their_row_at_once(small_vocab, method):
    target, prompts, greedy = small_vocab
    engine = _engine(target, method, 3)
    one = engine.generate(prompts, max_new_tokens=1, concurrency=2)
    assert one.tokens == [g[:1] for g in greedy]
    assert one.metrics.num_steps == 0  # every request finished at admission
    eos = (greedy[0][0],)  # request 0 (and any other starting with it) stops at once
    want = [_engine(target, "baseline").generate([p], eos_token_ids=eos).tokens[0] for p in prompts]
    assert engine.generate(prompts, eos_token_ids=eos, concurrency=3).tokens == want


def test_continuous_and_static_calls_share_the_engine_without_stale_state(small_vocab):
    target, prompts, greedy = small_vocab
    engine = _engine(target, "peagle", 4)
    assert engine.generate(prompts[:3]).tokens == greedy[:3]
    assert engine.generate(prompts, concurrency=3).tokens == greedy
    assert engine.generate(prompts[::-1], concurrency=2).tokens == greedy[::-1]  # smaller c, same caches
    assert engine.generate(prompts[:4]).tokens == greedy[:4]
    assert engine._scratch_caches[0].max_batch == max(1, 2 // SpecConfig().refill_divisor)


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_refill_divisor_sets_how_many_rows_one_admission_fills(small_vocab, method):
    """Divisor 1 waits until all c rows are free (batch after batch); divisor c admits each request as soon
    as its row frees. Both are lossless; the eager one runs fewer steps, since no row waits for the others
    (requests of one length still take their own number of steps: acceptance differs between them)."""
    target, prompts, greedy = small_vocab
    runs = {}
    for d in (1, 4):
        engine = _engine(target, method, 3, refill_divisor=d)
        runs[d] = engine.generate(prompts, concurrency=4)
        assert runs[d].tokens == greedy
        assert engine._scratch_caches[0].max_batch == 4 // d
    assert runs[4].metrics.num_steps < runs[1].metrics.num_steps


def test_concurrency_at_or_above_the_prompt_count_is_one_batch(small_vocab):
    target, prompts, greedy = small_vocab
    engine = _engine(target, "eagle3", 2)
    r = engine.generate(prompts[:3], concurrency=8)
    assert r.tokens == greedy[:3] and getattr(engine, "_scratch_caches", None) is None


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_bad_concurrency_names_the_value(small_vocab, bad):
    target, prompts, _ = small_vocab
    with pytest.raises(ValueError, match="concurrency"):
        _engine(target, "peagle").generate(prompts, concurrency=bad)


def test_sampling_with_continuous_batching_makes_each_request_its_own_length(small_vocab):
    """Temperature > 0: rejection sampling on every row, drafts' probabilities merged per row."""
    target, prompts, _ = small_vocab
    r = _engine(target, "peagle", 3, temperature=0.8, seed=5).generate(prompts, max_new_tokens=12, concurrency=2)
    assert [len(t) for t in r.tokens] == [12] * len(prompts)
    assert all(0 <= x < 6 for t in r.tokens for x in t)
    assert r.metrics.num_drafts > 0


@pytest.mark.parametrize("method", ["baseline", "eagle3", "peagle"])
def test_admissions_pad_to_their_own_group_and_leave_the_rest_of_a_reused_row_unread(small_vocab, method):
    """Each admission is as wide as its own group's longest prompt (not the call's), and only the positions
    it wrote reach the main caches. Past them a reused row keeps what was there before: garbage here, filled
    into every cache position before the call, and still the outputs are greedy, so nothing reads it."""
    import torch

    target, prompts, greedy = small_vocab
    long_prompt = [(3 * i) % 6 for i in range(40)]
    want = [_engine(target, "baseline").generate([long_prompt]).tokens[0]] + greedy
    engine = _engine(target, method, 3, refill_divisor=2)
    c = 4
    engine.reserve(c + 1, 64 + MAX_NEW + 3 + 1)
    gen = torch.Generator().manual_seed(0)
    for t in engine.cache_tensors():
        t.copy_(100 * torch.randn(t.shape, generator=gen, dtype=t.dtype))
    groups, widths = [], []
    admit, prefill = engine._admit, engine._prefill

    def spy_admit(ps, reqs, rows, g, *timer):
        groups.append([len(ps[q]) for q in reqs])
        return admit(ps, reqs, rows, g, *timer)

    def spy_prefill(ids, *a, tag="batch", **kw):
        if tag == "admit":
            widths.append(ids.shape[1])
        return prefill(ids, *a, tag=tag, **kw)

    engine._admit, engine._prefill = spy_admit, spy_prefill
    assert engine.generate([long_prompt] + prompts, concurrency=c).tokens == want
    assert widths == [max(g) for g in groups] and len(groups) >= 3  # on a CPU the width is not rounded up
    assert min(widths) < max(widths) == len(long_prompt)  # later groups are not padded to the long prompt


def test_copy_kv_blocks_copies_a_prefix_of_each_block_when_asked():
    import torch

    from peagle_lab.engine import copy_kv_blocks
    from peagle_lab.models.kv_cache import KVCache

    src = KVCache.allocate(2, 2, 8, 1, 4, torch.float32, "cpu")
    dst = KVCache.allocate(2, 3, 8, 1, 4, torch.float32, "cpu")
    for t in (*src.k, *src.v):
        t.copy_(torch.arange(t.numel(), dtype=torch.float32).view(t.shape))
    for t in (*dst.k, *dst.v):
        t.fill_(-1.0)
    copy_kv_blocks(src, dst, torch.tensor([2, 0]), 5)
    for s, d in zip((*src.k, *src.v), (*dst.k, *dst.v)):
        sb, db = s[:16].view(2, 8, 1, 4), d[:24].view(3, 8, 1, 4)
        assert torch.equal(db[2, :5], sb[0, :5]) and torch.equal(db[0, :5], sb[1, :5])
        assert (db[:, 5:] == -1).all() and (db[1] == -1).all() and d[-1].eq(-1).all()  # the rest untouched
    copy_kv_blocks(src, dst, torch.tensor([1, 0]), 100)  # longer than a block: the whole block
    assert torch.equal(dst.k[0][8:16], src.k[0][:8])
    with pytest.raises(ValueError, match="length=0"):
        copy_kv_blocks(src, dst, torch.tensor([1, 0]), 0)


def test_copy_kv_blocks_is_one_copy_of_the_stacked_tensor_and_matches_the_per_layer_copy():
    import torch

    from peagle_lab.engine import copy_kv_blocks
    from peagle_lab.models.kv_cache import KVCache

    src = KVCache.allocate(3, 2, 8, 2, 4, torch.float32, "cpu")
    assert src.kv is not None and all(t.data_ptr() == src.kv[i].data_ptr() for i, t in enumerate((*src.k, *src.v)))
    src.kv.copy_(torch.randn(src.kv.shape))
    dests = [KVCache.allocate(3, 3, 8, 2, 4, torch.float32, "cpu") for _ in range(2)]
    dests[1] = KVCache([t.clone() for t in dests[1].k], [t.clone() for t in dests[1].v], 3, 8)  # separate tensors
    for d in dests:
        for t in (*d.k, *d.v):
            t.fill_(-1.0)
        copy_kv_blocks(src, d, torch.tensor([2, 0]), 5)
    assert dests[1].kv is None
    for a, b in zip((*dests[0].k, *dests[0].v), (*dests[1].k, *dests[1].v)):
        assert torch.equal(a, b)
    assert torch.equal(dests[0].v[2][16:21], src.v[2][:5]) and dests[0].v[2][21:24].eq(-1).all()

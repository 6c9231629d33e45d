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

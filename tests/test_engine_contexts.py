"""The contexts a decode step attends to (``StepTrace.context_sum`` …, ``engine.context_summary``): the host's
bookkeeping against a hand computation, for static and continuous batches and every method."""
from __future__ import annotations

import pytest

from peagle_lab.bench.sweep import Cell, SweepConfig, cell_row
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder, context_summary
from peagle_lab.testing import tiny_drafter, tiny_target

PROMPTS = [[1] * 3, [2] * 5, [3] * 8]  # prompts of 3, 5 and 8 tokens


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=2, vocab_size=6, eos_token_id=None)  # random drafters are often right: K paths run


def _engine(target, method: str, k: int = 3, **kw) -> SpecDecoder:
    drafter = None if method == "baseline" else tiny_drafter(target, method, seed=k)
    return SpecDecoder(target, drafter, SpecConfig(method=method, num_speculative_tokens=k, **kw))


def _contexts(trace) -> list[tuple]:
    return [(s.context_sum, s.longest_context, s.row_context_sum, s.longest_row_context) for s in trace]


def test_a_static_batch_of_plain_decoding_records_each_steps_contexts(target):
    # 4 tokens each, one a step: 3 steps at contexts prompt + 1, + 2, + 3 (the first token came from the prefill)
    res = _engine(target, "baseline", max_new_tokens=4).generate(PROMPTS, eos_token_ids=())
    assert _contexts(res.trace) == [(4 + 6 + 9, 9, 19, 9), (5 + 7 + 10, 10, 22, 10), (6 + 8 + 11, 11, 25, 11)]
    assert context_summary(res.trace) == {"mean_context": 66 / 9, "longest_context": 10.0,
                                          "mean_row_context": 66 / 9, "longest_row_context": 10.0}


def test_a_continuous_batch_counts_busy_rows_and_the_idle_rows_last_context(target):
    # c = 2: requests 0 and 1 decode 3 steps; then request 2 (8 tokens) takes row 0, and row 1 stays idle at
    # request 1's last context (5 + 4 tokens), which its queries still walk
    res = _engine(target, "baseline", max_new_tokens=4).generate(PROMPTS, eos_token_ids=(), concurrency=2)
    assert _contexts(res.trace) == [(4 + 6, 6, 10, 6), (5 + 7, 7, 12, 7), (6 + 8, 8, 14, 8),
                                    (9, 9, 9 + 9, 9), (10, 10, 10 + 9, 10), (11, 11, 11 + 9, 11)]
    summary = context_summary(res.trace)
    assert summary["mean_context"] == pytest.approx((10 + 12 + 14 + 9 + 10 + 11) / 9)
    assert summary["longest_context"] == pytest.approx((6 + 7 + 8 + 9 + 10 + 11) / 6)
    assert summary["mean_row_context"] == pytest.approx((10 + 12 + 14 + 18 + 19 + 20) / 12)


def _replay(prompt_lens: list[int], answer_lens: list[int], trace) -> None:
    """Each step's busy requests (in request order: compaction keeps the live rows' order) and their contexts,
    from the accepted counts: a request makes accepted + 1 tokens a step until it has its answer."""
    made = [1] * len(prompt_lens)  # the first token, from the prefill
    for s in trace:
        busy = [r for r, n in enumerate(made) if n < answer_lens[r]]
        assert len(busy) == len(s.num_accepted)
        ctx = [prompt_lens[r] + made[r] for r in busy]
        assert (s.context_sum, s.longest_context) == (sum(ctx), max(ctx))
        assert s.row_context_sum >= s.context_sum and s.longest_row_context >= s.longest_context
        for r, a in zip(busy, s.num_accepted):
            made[r] += a + 1
    assert all(m >= a for m, a in zip(made, answer_lens))


@pytest.mark.parametrize("method", ["baseline", "eagle3", "peagle"])
def test_a_static_batch_stopping_at_eos_records_what_its_accepted_counts_give(target, method):
    """Answers of different lengths (EOS = token 0), a batch that compacts: the contexts follow the accepted tokens."""
    prompts = [[(i * 7 + j) % 5 + 1 for j in range(2 + 3 * i)] for i in range(6)]
    res = _engine(target, method, k=3, max_new_tokens=12).generate(prompts, eos_token_ids=(0,))
    answers = [len(t) for t in res.tokens]
    assert len(set(answers)) > 1  # requests finish at different steps
    _replay([len(p) for p in prompts], answers, res.trace)
    if method != "baseline":
        assert any(any(s.num_accepted) for s in res.trace)  # drafts were accepted: steps of several tokens


@pytest.mark.parametrize("method", ["baseline", "eagle3", "peagle"])
def test_one_row_decoding_requests_in_turn_records_each_requests_contexts(target, method):
    res = _engine(target, method, k=2, max_new_tokens=7).generate(PROMPTS, eos_token_ids=(), concurrency=1)
    answers = [len(t) for t in res.tokens]
    made, steps = [1, 1, 1], iter(res.trace)
    for r, (prompt, answer) in enumerate(zip(PROMPTS, answers)):
        while made[r] < answer:  # one row: request r's steps, then the next request's
            s = next(steps)
            assert (s.context_sum, s.longest_context) == (len(prompt) + made[r], len(prompt) + made[r])
            made[r] += s.num_accepted[0] + 1
    assert next(steps, None) is None


def test_the_bench_row_records_the_cells_contexts(target):
    engine = _engine(target, "peagle", max_new_tokens=4)
    a, b = (engine.generate(p, eos_token_ids=()) for p in (PROMPTS[:2], PROMPTS[2:]))
    row = cell_row(Cell("chat", "peagle", 3, 2), [a, b], SweepConfig(max_new_tokens=4)).to_dict()
    want = context_summary(a.trace + b.trace)
    assert {k: row[k] for k in want} == {k: round(v, 1) for k, v in want.items()}
    assert row["longest_context"] >= row["mean_context"] > 3

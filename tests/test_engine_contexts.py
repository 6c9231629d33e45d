"""The contexts a decode step attends to (``StepTrace.context_sum`` …, ``engine.context_summary``): the host's
bookkeeping against a hand computation, for static and continuous batches and every method; an idle row runs at
positions 0..K, so the decode attention reads K + 1 of its keys (its ``kv_len``), not its last request's."""
from __future__ import annotations

import os

import pytest

from peagle_lab.bench.sweep import Cell, SweepConfig, cell_row
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder, context_summary
from peagle_lab.engine.metrics import IDLE_CONTEXT
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


def test_a_continuous_batch_counts_busy_rows_and_its_idle_row_at_one_key(target):
    # c = 2: requests 0 and 1 decode 3 steps; then request 2 (8 tokens) takes row 0, and row 1 stays idle:
    # it runs at positions 0..K (K = 0), a context of IDLE_CONTEXT = 1, not request 1's last (5 + 4)
    res = _engine(target, "baseline", max_new_tokens=4).generate(PROMPTS, eos_token_ids=(), concurrency=2)
    assert _contexts(res.trace) == [(4 + 6, 6, 10, 6), (5 + 7, 7, 12, 7), (6 + 8, 8, 14, 8),
                                    (9, 9, 9 + 1, 9), (10, 10, 10 + 1, 10), (11, 11, 11 + 1, 11)]
    summary = context_summary(res.trace)
    assert summary["mean_context"] == pytest.approx((10 + 12 + 14 + 9 + 10 + 11) / 9)
    assert summary["longest_context"] == pytest.approx((6 + 7 + 8 + 9 + 10 + 11) / 6)
    assert summary["mean_row_context"] == pytest.approx((10 + 12 + 14 + 10 + 11 + 12) / 12)
    assert summary["longest_row_context"] == summary["longest_context"]


def test_a_draining_continuous_batch_no_longer_walks_its_longest_finished_request(target):
    # c = 2: request 1 (8 prompt tokens) is the long one; once requests 0 and 1 end (4 tokens each), request 2
    # (5 tokens) takes row 0 and row 1 idles. Its queries used to walk request 1's 8 + 4 = 12 keys, the step's
    # longest row (rows (6 + 12, 12), (7 + 12, 12), (8 + 12, 12)); now they read one key.
    prompts = [[1] * 3, [3] * 8, [2] * 5]
    res = _engine(target, "baseline", max_new_tokens=4).generate(prompts, eos_token_ids=(), concurrency=2)
    assert _contexts(res.trace) == [(4 + 9, 9, 13, 9), (5 + 10, 10, 15, 10), (6 + 11, 11, 17, 11),
                                    (6, 6, 6 + 1, 6), (7, 7, 7 + 1, 7), (8, 8, 8 + 1, 8)]
    summary = context_summary(res.trace)
    assert summary["longest_row_context"] == summary["longest_context"] == pytest.approx((9 + 10 + 11 + 6 + 7 + 8) / 6)


def test_a_static_batch_whose_long_request_ends_first_runs_it_idle_once_the_host_knows(target):
    # EOS = 2: request 0 (8 prompt tokens) answers 0, 4, 4, 2 and ends at step 3; requests 1 and 2 (3 and 2 prompt
    # tokens) run to 7 tokens, 6 steps. A busy row's context at step s is its prompt + s. Plain decoding queues
    # step s + 1 before it reads step s, so step 4 still runs request 0 live (8 + 4 keys); from step 5 on it idles
    # at one key, where it used to walk 12 (rows 15 + 12, 17 + 12: longest 12, not 8 and 9).
    prompts = [[2] * 8, [1] * 3, [5] * 2]
    res = _engine(target, "baseline", max_new_tokens=7).generate(prompts, eos_token_ids=(2,))
    assert [len(t) for t in res.tokens] == [4, 7, 7]
    assert _contexts(res.trace) == [(9 + 4 + 3, 9, 16, 9), (10 + 5 + 4, 10, 19, 10), (11 + 6 + 5, 11, 22, 11),
                                    (7 + 6, 7, 13 + 12, 12), (8 + 7, 8, 15 + 1, 8), (9 + 8, 9, 17 + 1, 9)]


def _replay(prompt_lens: list[int], answer_lens: list[int], trace, ahead: bool) -> None:
    """Each step's busy requests (in request order: compaction keeps the live rows' order) and their contexts,
    from the accepted counts: a request makes accepted + 1 tokens a step until it has its answer. The rows the
    step ran live are the busy ones and, with ``ahead`` (plain decoding queues step s + 1 before it reads step
    s), those busy the step before; every other row of the step idles at IDLE_CONTEXT."""
    made, before = [1] * len(prompt_lens), None  # the first token, from the prefill; the last step's busy rows
    for s in trace:
        busy = [r for r, n in enumerate(made) if n < answer_lens[r]]
        assert len(busy) == len(s.num_accepted)
        ran = sorted(set(busy) | set(before)) if ahead and before is not None else busy
        ctx, live = ([prompt_lens[r] + made[r] for r in rows] for rows in (busy, ran))
        idle = s.rows - len(ran)
        assert (s.context_sum, s.longest_context) == (sum(ctx), max(ctx))
        assert (s.row_context_sum, s.longest_row_context) == (sum(live) + idle * IDLE_CONTEXT,
                                                              max(live + [IDLE_CONTEXT] * (idle > 0)))
        for r, a in zip(busy, s.num_accepted):
            made[r] += a + 1
        before = busy
    assert all(m >= a for m, a in zip(made, answer_lens))


@pytest.mark.parametrize("method", ["baseline", "eagle3", "peagle"])
def test_a_static_batch_stopping_at_eos_records_what_its_accepted_counts_give(target, method):
    """Answers of different lengths (EOS = token 0), a batch that compacts: the contexts follow the accepted tokens."""
    prompts = [[(i * 7 + j) % 5 + 1 for j in range(2 + 3 * i)] for i in range(6)]
    res = _engine(target, method, k=3, max_new_tokens=12).generate(prompts, eos_token_ids=(0,))
    answers = [len(t) for t in res.tokens]
    assert len(set(answers)) > 1  # requests finish at different steps
    _replay([len(p) for p in prompts], answers, res.trace, ahead=method == "baseline")
    if method != "baseline":  # no step runs a finished request live: the longest row is the longest busy one
        assert all(s.longest_row_context == s.longest_context for s in res.trace)
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


DRAIN = dict(prompts=[[1] * 3, [3] * 8, [2] * 5], max_new_tokens=5, eos_token_ids=(), concurrency=2)
TAIL = dict(prompts=[[2] * 8, [1] * 3, [5] * 2], max_new_tokens=7, eos_token_ids=(2,), concurrency=None)


@pytest.mark.parametrize("batch", [DRAIN, TAIL], ids=["continuous-drain", "static-tail"])
@pytest.mark.parametrize("method", ["baseline", "eagle3", "peagle"])
def test_the_target_attends_over_the_contexts_the_trace_records(target, method, batch):
    """The decode attention's ``kv_len`` per row: a live row's context + K, an idle row's K + 1 (positions
    0..K); the trace's row contexts say the same, and the output stays plain greedy's."""
    from peagle_lab.kernels.decode_attention import decode_attention_ref

    k, layers = 2, target.config.num_hidden_layers
    plain = _engine(target, "baseline", max_new_tokens=batch["max_new_tokens"])
    want = plain.generate(batch["prompts"], eos_token_ids=batch["eos_token_ids"]).tokens
    engine = _engine(target, method, k=k, max_new_tokens=batch["max_new_tokens"])
    engine.reserve(3, 64)  # the caches both batches use: the spy stays on them
    calls = []

    def spy(q, keys, values, mask, kv_len):  # the reference honours kv_len: a key it hides is not read
        calls.append(kv_len.tolist())
        return decode_attention_ref(q, keys, values, mask, kv_len)

    engine.caches.t.decode_attention = spy
    res = engine.generate(batch["prompts"], eos_token_ids=batch["eos_token_ids"], concurrency=batch["concurrency"])
    assert res.tokens == want
    steps, kk = calls[::layers], engine.config.k  # one call a layer; plain decoding may queue one step more
    assert len(calls) % layers == 0 and len(res.trace) <= len(steps) <= len(res.trace) + 1
    for s, kv_len in zip(res.trace, steps):
        assert len(kv_len) == s.rows
        assert (sum(kv_len), max(kv_len)) == (s.row_context_sum + s.rows * kk, s.longest_row_context + kk)
    # steps with a finished request's row: it reads K + 1 keys (plain decoding's static tail runs it live once more)
    idle = [kk + 1 in kv_len for s, kv_len in zip(res.trace, steps) if len(s.num_accepted) < s.rows]
    assert idle and (all(idle) if kk or batch is DRAIN else any(idle))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the engine on a CPU through the interpreted kernel")
@pytest.mark.parametrize("batch", [DRAIN, TAIL], ids=["continuous-drain", "static-tail"])
def test_idle_rows_through_the_split_kv_kernel_stay_lossless(target, batch):
    """The Triton decode kernel (interpreted) with idle rows at kv_len K + 1 beside live ones: plain greedy's tokens."""
    want = _engine(target, "baseline", max_new_tokens=batch["max_new_tokens"]).generate(
        batch["prompts"], eos_token_ids=batch["eos_token_ids"]).tokens
    engine = _engine(target, "peagle", k=3, max_new_tokens=batch["max_new_tokens"], decode_attention="triton",
                     compile="off")
    res = engine.generate(batch["prompts"], eos_token_ids=batch["eos_token_ids"], concurrency=batch["concurrency"])
    assert res.tokens == want
    assert any(len(s.num_accepted) < s.rows for s in res.trace)  # a step ran an idle row

"""The engine: lossless for both methods, any K and batch, and what each step costs."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.config import SpecConfig
from peagle_lab.drafting import DraftResult
from peagle_lab.engine import SpecDecoder
from peagle_lab.testing import tiny_drafter, tiny_target

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [3, 1, 4, 1, 5, 9, 2, 6, 5]]


def run(target, drafter, method, k=3, prompts=PROMPTS, eos_token_ids=None, **kw):
    """Decode ``prompts``; draft kernels: the PyTorch reference on a CPU unless ``kernel_backend`` says otherwise."""
    cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=kw.pop("max_new_tokens", 24), **kw)
    return SpecDecoder(target, drafter, cfg).generate(prompts, eos_token_ids=eos_token_ids)


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture(scope="module")
def baseline(target):
    return {c: run(target, None, "baseline", prompts=PROMPTS[:c]).tokens for c in (1, 3)}


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("layers", [1, 2])
def test_lossless_with_random_drafters(target, baseline, method, k, c, layers):
    drafter = tiny_drafter(target, method, num_hidden_layers=layers, seed=k + c)
    got = run(target, drafter, method, k, prompts=PROMPTS[:c])
    assert got.tokens == baseline[c]


@pytest.mark.parametrize("method", ["baseline", "eagle3", "peagle"])
@pytest.mark.parametrize("graph_tokens", [None, 64])
def test_padded_prefill_is_lossless(target, baseline, method, graph_tokens, monkeypatch):
    # SpecConfig.prefill_graphs pads the prompts' width to a multiple of 64 (on CUDA, to replay one graph per
    # shape; here the padding alone). Over PREFILL_GRAPH_TOKENS (c x padded width) the prefill stays eager.
    from peagle_lab import step
    from peagle_lab.engine import forwards as engine_mod

    if graph_tokens:
        monkeypatch.setattr(engine_mod, "PREFILL_GRAPH_TOKENS", graph_tokens)
    widths = []
    real = step.prefill
    monkeypatch.setattr(step, "prefill", lambda t, ids, *a, **kw: widths.append(ids.shape[1]) or real(t, ids, *a, **kw))
    drafter = None if method == "baseline" else tiny_drafter(target, method, seed=3)
    got = run(target, drafter, method, 4, prefill_graphs=True)
    assert got.tokens == baseline[3]
    padded = -(-max(map(len, PROMPTS)) // engine_mod.PREFILL_ALIGN) * engine_mod.PREFILL_ALIGN
    assert widths == [max(map(len, PROMPTS)) if graph_tokens else padded]


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_the_first_draft_at_the_padded_width_drafts_what_the_unpadded_one_does(target, baseline, method):
    # first_draft_graphs runs the first draft after a padded prefill at the padded width (on CUDA as one graph
    # per shape; here the padding alone): the extra slots lie past every prompt, so the drafts must not change.
    drafts = {}
    for first in (False, True):
        engine = SpecDecoder(target, tiny_drafter(target, method, seed=7),
                             SpecConfig(method=method, num_speculative_tokens=4, max_new_tokens=24,
                                        prefill_graphs=True, first_draft_graphs=first))
        seen = drafts.setdefault(first, [])
        engine.on_draft = lambda res, seen=seen: seen.append(res.tokens.clone())
        widths = []
        real = engine._draft
        engine._draft = lambda *a, **kw: widths.append(a[2].shape[1]) or real(*a, **kw)
        assert engine.generate(PROMPTS).tokens == baseline[3]
        assert widths[0] == (64 if first else max(map(len, PROMPTS)))  # the first draft's width
    assert len(drafts[True]) == len(drafts[False])
    assert all(torch.equal(a, b) for a, b in zip(drafts[True], drafts[False]))


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_both_kernel_backends_are_lossless(target, baseline, method, backend):
    got = run(target, tiny_drafter(target, method), method, 4, kernel_backend=backend)
    assert got.tokens == baseline[3]


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_lossless_on_a_tiny_vocabulary_where_random_drafts_are_often_accepted(method):
    target = tiny_target(seed=2, vocab_size=6, eos_token_id=None)
    prompts = [[1, 2, 3], [4], [5, 0, 5, 0]]
    base = run(target, None, "baseline", prompts=prompts, max_new_tokens=40).tokens
    for k in (2, 5):
        r = run(target, tiny_drafter(target, method, seed=k), method, k, prompts=prompts, max_new_tokens=40)
        assert r.tokens == base
        assert r.metrics.num_accepted_tokens > 0  # the acceptance path really ran


def oracle_drafts(engine, truth, corrupt_every: int):
    """Replace the drafter by the true continuation, corrupting one draft every few steps."""
    real = engine._draft
    calls = {"n": 0}

    def fake(cache, taps, ids, pos, n, bonus, max_len, gen, timer=None, graph_first=False, **kw):
        res, marks = real(cache, taps, ids, pos, n, bonus, max_len, gen, timer, graph_first, **kw)
        k = res.tokens.shape[1]
        # the new token sits at position pos[:, 0] + n + 1 = prompt length + outputs so far - 1
        start = pos[:, 0] + n + 2 - torch.tensor([len(p) for p in PROMPTS], device=pos.device)
        if calls["n"] == 0:  # after prefill: the bonus is output 0, drafts are outputs 1..k
            start = torch.ones_like(start)
        toks = torch.tensor([[(truth[b] + [0] * 64)[int(start[b]) + j] for j in range(k)]
                             for b in range(len(truth))])
        calls["n"] += 1
        if calls["n"] % corrupt_every == 0:
            toks[:, (calls["n"] // corrupt_every) % k] = (toks[:, (calls["n"] // corrupt_every) % k] + 1) % 96
        return DraftResult(toks, None, res.num_forwards, res.inputs), marks

    engine._draft = fake


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_lossless_and_counted_when_drafts_are_mostly_right(target, baseline, method):
    k = 4
    engine = SpecDecoder(target, tiny_drafter(target, method),  # the fake drafts by row: rows keep their request
                         SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=24, compact_rows=False))
    oracle_drafts(engine, baseline[3], corrupt_every=3)
    got = engine.generate(PROMPTS)
    assert got.tokens == baseline[3]
    m = got.metrics
    assert m.acceptance_length > 2.0
    assert m.num_draft_tokens == k * m.num_drafts
    assert sum(m.accepted_per_position) == m.num_accepted_tokens
    # per-position acceptance is unconditional and so can only fall with the position
    assert all(a >= b for a, b in zip(m.accepted_per_position, m.accepted_per_position[1:]))
    assert m.output_tokens == sum(len(t) for t in got.tokens)


def count_forwards(drafter):
    counter = {"n": 0}
    drafter.register_forward_hook(lambda *a: counter.__setitem__("n", counter["n"] + 1))
    return counter


@pytest.mark.parametrize("k", [1, 3, 7])
def test_peagle_runs_one_drafter_pass_per_step_and_eagle3_runs_k(target, k):
    for method, per_step in (("peagle", 1), ("eagle3", k)):
        drafter = tiny_drafter(target, method)
        counter = count_forwards(drafter)
        r = run(target, drafter, method, k, max_new_tokens=12)
        drafting_steps = 1 + sum(1 for s in r.trace if s.drafter_forwards)  # +1: after prefill
        assert counter["n"] == per_step * drafting_steps
        assert all(s.drafter_forwards in (0, per_step) for s in r.trace)


def test_eos_stops_each_request_where_baseline_stops(target, baseline):
    eos = baseline[3][1][5]  # a token request 1 emits at its sixth step
    base = run(target, None, "baseline", eos_token_ids=(eos,))
    assert base.tokens[1][-1] == eos and len(base.tokens[1]) <= 6
    for method in ("eagle3", "peagle"):
        got = run(target, tiny_drafter(target, method), method, 5, eos_token_ids=(eos,))
        assert got.tokens == base.tokens


def cache_free_greedy(target, prompt, max_new, eos=()):
    """Greedy decoding the slow way: the whole sequence through the target at every token, no KV cache."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_new):
            x = torch.tensor([ids])
            ids.append(int(target(x, torch.arange(len(ids))[None]).logits[0, -1].argmax()))
            if ids[-1] in eos:
                break
    return ids[len(prompt):]


@pytest.mark.parametrize("stop", ["length", "eos of one", "eos of all"])
def test_plain_decoding_queues_a_step_ahead_and_still_equals_cache_free_greedy(target, baseline, stop):
    # Plain decoding queues step n + 1 before it reads step n's tokens (engine._may_continue): a request that
    # finished at step n is decoded once more with its output ignored. When the last requests stop at the
    # length limit no queued step is thrown away; when they stop at an EOS, exactly one is.
    eos = () if stop == "length" else (baseline[3][1][5],)  # request 1's sixth token: it stops early
    prompts = PROMPTS[1:2] if stop == "eos of all" else PROMPTS
    engine = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=24))
    launches = []
    real = engine._launch
    engine._launch = lambda *a, **kw: launches.append(1) or real(*a, **kw)
    got = engine.generate(prompts, eos_token_ids=eos)
    assert got.tokens == [cache_free_greedy(target, p, 24, eos) for p in prompts]
    longest = max(map(len, got.tokens))
    assert len(got.trace) == longest - 1  # one token a step after the prefill's
    assert len(launches) - len(got.trace) == (0 if longest == 24 else 1)
    assert (longest < 24) == (stop == "eos of all")


def test_sampling_is_deterministic_under_a_seed(target):
    drafter = tiny_drafter(target, "peagle")
    a = run(target, drafter, "peagle", 3, temperature=1.0, seed=7).tokens
    b = run(target, drafter, "peagle", 3, temperature=1.0, seed=7).tokens
    c = run(target, drafter, "peagle", 3, temperature=1.0, seed=8).tokens
    assert a == b and a != c


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_speculative_tokens=0), r"num_speculative_tokens=0 is out of range; expected \[1, 16\]"),
    (dict(num_speculative_tokens=17), r"num_speculative_tokens=17 is out of range"),
    (dict(temperature=-0.5), r"temperature=-0.5 must be a number in \[0, 100\]"),
    (dict(method="medusa"), r"method='medusa' is not one of"),
    (dict(max_new_tokens=0), r"max_new_tokens=0 is out of range"),
])
def test_bad_config_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig(**kwargs)


def test_bad_requests_and_mismatched_drafters(target):
    engine = SpecDecoder(target, None, SpecConfig(method="baseline"))
    with pytest.raises(ValueError, match="non-empty list"):
        engine.generate([])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[1], []])
    with pytest.raises(ValueError, match=r"outside \[0, 96\)"):
        engine.generate([[1, 500]])
    with pytest.raises(ValueError, match="encode text"):
        engine.generate(["hello"])
    with pytest.raises(ValueError, match="exceeds the model's context of 1024"):
        engine.generate([[1] * 1000], max_new_tokens=100)
    with pytest.raises(ValueError, match="needs a drafter"):
        SpecDecoder(target, None, SpecConfig(method="peagle"))
    with pytest.raises(ValueError, match="built for method='eagle3'"):
        SpecDecoder(target, tiny_drafter(target, "eagle3"), SpecConfig(method="peagle"))
    other = tiny_target(vocab_size=50)
    with pytest.raises(ValueError, match="does not fit the target"):
        SpecDecoder(target, tiny_drafter(other, "peagle"), SpecConfig(method="peagle"))


def test_engine_reuses_its_caches_without_stale_state(target, baseline):
    engine = SpecDecoder(target, tiny_drafter(target, "peagle"), SpecConfig(method="peagle", max_new_tokens=24))
    long_first = engine.generate([[7] * 30, [8] * 25, [9] * 20], max_new_tokens=24)
    assert long_first.tokens == run(target, None, "baseline", prompts=[[7] * 30, [8] * 25, [9] * 20]).tokens
    cache = engine._cache_t
    assert engine.generate(PROMPTS[:1]).tokens == baseline[1]  # smaller batch, same caches
    assert engine._cache_t is cache
    assert engine.generate(PROMPTS).tokens == baseline[3]


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_a_drafting_window_is_lossless_and_changes_what_the_drafter_sees(target, baseline, method):
    # DrafterConfig.sliding_window keeps each drafting query to its last W positions (heads trained on short
    # sequences keep their deep drafts over long prompts). Output stays the plain greedy output, and a window
    # narrower than the prompts must change the drafts (else the window is not applied in the cached path).
    import dataclasses

    drafts = {}
    for window in (None, 2):
        drafter = tiny_drafter(target, method, seed=5)
        drafter.config = dataclasses.replace(drafter.config, sliding_window=window)
        seen = drafts.setdefault(window, [])
        drafter.register_forward_hook(lambda _m, _a, out, seen=seen: seen.append(out.logits.argmax(-1).flatten()))
        assert run(target, drafter, method, 4).tokens == baseline[3]
    first = min(len(drafts[None]), len(drafts[2]))
    assert any(not torch.equal(a, b) for a, b in zip(drafts[None][:first], drafts[2][:first]))


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_a_fresh_first_draft_pass_matches_the_masked_one_over_stale_cache_rows(target, method):
    # A first draft's pass attends causally over its own keys (Drafter.forward(fresh=True)); it must give what
    # the masked pass over the whole cache block gives, with the block full of an earlier request's keys, and
    # write the same KV. With a window shorter than the call, fresh is ignored (the window would bind).
    import dataclasses

    from peagle_lab import step
    from peagle_lab.models import llama
    from peagle_lab.models.kv_cache import attend

    prompts, K, max_len = [[5, 6, 7, 8, 9], [10, 11, 12], [3, 1, 4, 1, 5, 9, 2, 6, 5]], 4, 32
    ids, pos, lens = step.pad_prompts(prompts, target.device)
    out = step.prefill(target, ids, pos, lens, target.allocate_cache(len(prompts), max_len), max_len, taps=True)
    nxt = out.logits[:, 0].argmax(-1)
    for window in (None, 4):
        d = tiny_drafter(target, method, seed=2)
        d.config = dataclasses.replace(d.config, sliding_window=window)
        inputs, hidden = step.prepare_draft(d, out.taps, ids, pos, lens - 1, nxt, K, max_len)
        c, R = len(prompts), inputs.rows_per_request
        runs, masks = {}, []
        for fresh in (False, True):
            cache = d.allocate_cache(c, max_len)
            cache.kv.copy_(torch.randn(cache.kv.shape, generator=torch.Generator().manual_seed(7)))
            with pytest.MonkeyPatch.context() as mp:  # which path attention took: None is the causal one
                mp.setattr(llama, "attend", lambda q, k, v, mask, *a, **kw: masks.append(mask is None) or attend(
                    q, k, v, mask, *a, **kw))
                res = d(inputs.input_ids.view(c, R), hidden.view(c, R, -1), inputs.positions.view(c, R), cache=cache,
                        slot_mapping=inputs.slot_mapping.view(c, R), fresh=fresh)
            runs[fresh] = (res.logits, cache)
        assert masks == [False, window is None]
        valid = (inputs.slot_mapping >= 0).view(c, R)
        written = inputs.slot_mapping[inputs.slot_mapping >= 0]
        if window is None:
            torch.testing.assert_close(runs[True][0][valid], runs[False][0][valid], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(runs[True][1].kv[:, written], runs[False][1].kv[:, written], rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(runs[True][0], runs[False][0])  # fresh ignored: the masked path both times


SIX = [[5, 6, 7, 8, 9], [10, 11, 12], [3, 1, 4, 1, 5, 9, 2, 6, 5], [42], [20, 30, 40, 50], [7, 7, 7]]


def early_stops(target):
    """EOS ids that end requests 0-4 of SIX within their first 7 tokens and never end request 5."""
    full = run(target, None, "baseline", prompts=SIX, max_new_tokens=24).tokens
    eos = set()
    for out in full[:5]:
        early = [t for t in out[1:7] if t not in full[5]]
        assert early, "no early EOS candidate for this tiny model"
        eos.add(early[0])
    return tuple(sorted(eos))


@pytest.mark.parametrize("method,k", [("baseline", 0), ("eagle3", 3), ("peagle", 5)])
def test_a_static_batch_compacts_its_rows_as_requests_finish_and_stays_lossless(target, method, k):
    eos = early_stops(target)
    want = [cache_free_greedy(target, p, 24, eos) for p in SIX]
    assert len(want[5]) == 24 and all(len(w) < 8 for w in want[:5])
    drafter = None if method == "baseline" else tiny_drafter(target, method, seed=4)
    got = {}
    for compact in (True, False):
        engine = SpecDecoder(target, drafter, SpecConfig(method=method, num_speculative_tokens=max(k, 1),
                                                         max_new_tokens=24, compact_rows=compact))
        widths = []
        real = engine._launch
        engine._launch = lambda st, *a, real=real, widths=widths: widths.append(len(st.nxt)) or real(st, *a)
        res = engine.generate(SIX, eos_token_ids=eos)
        assert [s.rows for s in res.trace] == widths  # each step's trace holds the rows it ran
        got[compact] = (res.tokens, widths)
    assert got[True][0] == got[False][0] == want
    assert got[False][1] == [6] * len(got[False][1])
    if method == "baseline":  # plain decoding queues each step before reading the last: it keeps its rows
        assert got[True][1] == got[False][1]
        return
    # one request left of six: a width of 1 (the next power of two, and at most half of 6), and never wider again
    assert got[True][1][0] == 6 and got[True][1][-1] == 1
    assert got[True][1] == sorted(got[True][1], reverse=True)
    assert set(got[True][1]) <= {6, 2, 1}


def test_move_kv_blocks_gathers_every_layer_before_writing(target):
    from peagle_lab.engine import move_kv_blocks
    cache = target.allocate_cache(4, 8)
    torch.manual_seed(0)
    cache.kv.copy_(torch.randn_like(cache.kv))
    before = [t.clone() for t in (*cache.k, *cache.v)]
    L = cache.max_len
    move_kv_blocks(cache, [1, 2, 3], length=5)  # each block moves onto one that moves next
    for t, old in zip((*cache.k, *cache.v), before):
        blocks, was = t[: 4 * L].view(4, L, *t.shape[1:]), old[: 4 * L].view(4, L, *t.shape[1:])
        for dst, src in enumerate([1, 2, 3, 3]):  # block 3 keeps its keys
            assert torch.equal(blocks[dst, :5], was[src, :5])
            assert torch.equal(blocks[dst, 5:], was[dst, 5:])  # past length: as it was
        assert torch.equal(t[4 * L], old[4 * L])  # the trash slot is not a block
    for bad in ([2, 0], [1, 1], [3, 4]):
        with pytest.raises(ValueError, match="expected rising block numbers below 4"):
            move_kv_blocks(cache, bad)


def test_warm_widths_needs_caches_and_does_nothing_without_cuda_graphs(target):
    engine = SpecDecoder(target, tiny_drafter(target, "peagle"), SpecConfig(num_speculative_tokens=3))
    with pytest.raises(ValueError, match="call reserve"):
        engine.warm_widths(4)
    engine.reserve(4, 64)
    with pytest.raises(ValueError, match="concurrency=5 is out of range"):
        engine.warm_widths(5)
    assert engine.warm_widths(4) == []  # a CPU runs no graphs: the first narrow step compiles nothing either


def test_compact_moves_each_live_row_with_its_state_and_draft_distribution(target):
    from peagle_lab.engine.state import State as _State
    engine = SpecDecoder(target, tiny_drafter(target, "peagle"), SpecConfig(num_speculative_tokens=2, temperature=1.0))
    cache_t, cache_d = engine._caches(5, 16)
    L = cache_t.max_len
    for b in range(5):  # each block holds its row's number
        for t in (*cache_t.k, *cache_t.v):
            t[b * L:(b + 1) * L] = b
    probs = torch.rand(5, 2, target.config.vocab_size)
    st = _State(torch.arange(5), DraftResult(torch.arange(10).view(5, 2), probs, 1, None), torch.arange(5) + 10,
                torch.tensor([False, True, False, False, True]))
    outputs, done = [[b] for b in range(5)], [True, False, True, True, False]
    new, outs, flags = engine._compact(st, outputs, done, 4, cache_t, cache_d)
    # two live rows (1 and 4) fit in half of five: they move to rows 0 and 1, in order
    assert outs == [[1], [4]] and outs[0] is outputs[1] and flags == [False, False]
    assert new.nxt.tolist() == [1, 4] and new.start.tolist() == [11, 14] and new.active.tolist() == [True, True]
    assert new.draft.tokens.tolist() == [[2, 3], [8, 9]] and torch.equal(new.draft.draft_probs, probs[[1, 4]])
    # past the longest prompt (4), output (1) and 2K + 2 positions nothing was written: nothing more moves
    n = 4 + 1 + 2 * 2 + 2
    assert all(bool((t[:n] == 1).all() and (t[L:L + n] == 4).all() and (t[L + n:2 * L] == 1).all())
               for t in (*cache_t.k, *cache_t.v))
    # three live rows of five need four, which is not half: nothing moves
    done = [False, False, True, False, True]
    assert engine._compact(st, outputs, done, 4, cache_t, cache_d)[1] is outputs

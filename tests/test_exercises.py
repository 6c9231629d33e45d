"""The workshop exercise solutions (peagle_lab.lab.exercises) agree with the library."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from peagle_lab.lab import exercises as ex
from peagle_lab.kernels.fill_draft_hidden import fill_draft_hidden_ref
from peagle_lab.kernels.prepare_draft_inputs import prepare_draft_inputs
from peagle_lab.lab.layout import describe_draft_batch, layout_toy_batch, random_decode_batch


# ---------------------------------------------------------------- notebook 1
@pytest.mark.parametrize("alpha, k", [(0.0, 3), (0.5, 1), (0.8, 9), (0.95, 5), (1.0, 4)])
def test_simulated_acceptance_matches_the_formula(alpha, k):
    measured = ex.simulate_acceptance_length(alpha, k, steps=20000, seed=1)
    # 20000 steps: the standard error of AL is below 0.02 for these alpha, K.
    assert measured == pytest.approx(ex.expected_acceptance_length(alpha, k), abs=0.06)


def test_acceptance_length_saturates():
    assert ex.expected_acceptance_length(0.5, 0) == 1.0
    assert ex.expected_acceptance_length(0.8, 200) == pytest.approx(1 / (1 - 0.8))
    with pytest.raises(ValueError):
        ex.expected_acceptance_length(1.5, 3)


@pytest.mark.parametrize("wrong_at", [None, 0, 1, 3])
def test_verify_by_hand_agrees_with_verify_greedy(wrong_at):
    from peagle_lab.verify import verify_greedy

    k, g = 4, torch.Generator().manual_seed(wrong_at or 0)
    choices = torch.randint(0, 50, (k + 1,), generator=g)  # [K+1] the target's greedy tokens
    drafts = choices[:k].clone()
    if wrong_at is not None:
        drafts[wrong_at] = (drafts[wrong_at] + 1) % 50
    result = verify_greedy(torch.nn.functional.one_hot(choices, 50).float()[None], drafts[None])
    gained = [t for t in result.output_tokens[0].tolist() if t >= 0]
    assert ex.verify_by_hand(drafts.tolist(), choices.tolist()) == gained


@pytest.mark.parametrize("k", [1, 3, 7])
def test_drafter_work_counts_the_slots_the_layout_builds(k):
    from peagle_lab.lab.layout import toy_decode_batch

    batch = toy_decode_batch([k // 2], k=k)  # one request, T = K + 1 verified tokens
    peagle = batch.layout(k, mask_token_id=99, max_len=64, backend="torch")  # R = T + K - 1 slots
    assert ex.drafter_work("peagle", k=k, layers=4) == (1, 4 * len(peagle.input_ids))
    first = batch.layout(1, mask_token_id=99, max_len=64, backend="torch")  # EAGLE-3's first pass: no mask slots
    assert ex.drafter_work("eagle3", k=k, layers=1) == (k, len(first.input_ids) + k - 1)


# ---------------------------------------------------------------- notebook 2
@given(c=st.integers(1, 5), k=st.integers(1, 8), seed=st.integers(0, 2**16), max_len=st.integers(1, 1100))
def test_draft_row_by_hand_matches_the_reference(c, k, seed, max_len):
    batch = random_decode_batch(c, k, seed=seed)
    d = prepare_draft_inputs(batch.token_ids, batch.positions, batch.num_accepted, batch.bonus_tokens,
                             num_speculative_tokens=k, mask_token_id=5, max_len=max_len, backend="torch")
    R = d.rows_per_request
    for b in range(c):
        mine = ex.draft_row_by_hand(batch.token_ids[b].tolist(), batch.positions[b].tolist(),
                                    int(batch.num_accepted[b]), int(batch.bonus_tokens[b]), k=k,
                                    mask_token_id=5, request=b, max_len=max_len)
        for field in ("input_ids", "positions", "slot_mapping", "is_masked", "hidden_mapping"):
            assert mine[field] == getattr(d, field)[b * R:(b + 1) * R].tolist(), field
        assert [b * R + j for j in mine["sample_indices"]] == d.sample_indices[b * k:(b + 1) * k].tolist()


@given(k=st.integers(1, 8), data=st.data())
def test_padding_count_matches_the_layout(k, data):
    accepted = data.draw(st.lists(st.integers(0, k), min_size=1, max_size=5))
    rows = describe_draft_batch(layout_toy_batch(accepted, k, backend="torch"))
    assert ex.num_padding_slots(accepted, k) == sum(r.kind == "padding" for r in rows)


# ---------------------------------------------------------------- notebook 4
@given(c=st.integers(1, 5), k=st.integers(1, 6), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_fill_by_gather_matches_the_reference(c, k, seed, dtype):
    batch = random_decode_batch(c, k, seed=seed)
    d = prepare_draft_inputs(batch.token_ids, batch.positions, batch.num_accepted, batch.bonus_tokens,
                             num_speculative_tokens=k, mask_token_id=5, max_len=4096, backend="torch")
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(c * (k + 1), 8, generator=g).to(dtype)
    shared = torch.randn(8, generator=g).to(dtype)
    want = fill_draft_hidden_ref(hidden, d.hidden_mapping, d.is_masked, shared)
    assert torch.equal(ex.fill_draft_hidden_by_gather(hidden, d.hidden_mapping, d.is_masked, shared), want)


@pytest.mark.parametrize("accepted, k, H, e", [([2, 3], 3, 576, 2), ([0, 7, 4, 1], 7, 576, 4), ([1], 1, 16, 2)])
def test_bytes_match_the_tensors_moved(accepted, k, H, e):
    dtype = {2: torch.bfloat16, 4: torch.float32}[e]
    batch = layout_toy_batch(accepted, k, backend="torch")
    c, T = len(accepted), k + 1
    read_prep = 2 * torch.zeros(c, T, dtype=torch.long).nbytes + 2 * torch.zeros(c, dtype=torch.long).nbytes
    written_prep = sum(getattr(batch, f).nbytes for f in ("input_ids", "positions", "slot_mapping", "is_masked",
                                                          "hidden_mapping", "sample_indices"))
    used_rows = int((batch.hidden_mapping >= 0).sum())  # target rows the fill really reads
    row = torch.zeros(H, dtype=dtype).nbytes
    out = torch.zeros(c * batch.rows_per_request, H, dtype=dtype).nbytes
    fill = batch.hidden_mapping.nbytes + batch.is_masked.nbytes + used_rows * row + row + out
    assert ex.draft_batch_bytes(accepted, k, H, hidden_bytes=e) == read_prep + written_prep + fill


# ---------------------------------------------------------------- notebook 3
def test_chain_sees_is_chain_visible():
    from peagle_lab.train import CODConfig, chain_visible, sample_elements

    e = sample_elements(16, torch.arange(16) >= 3, CODConfig(num_depths=4), torch.Generator().manual_seed(3))
    pairs = list(zip(e.anchor.tolist(), e.depth.tolist()))
    mine = torch.tensor([[ex.chain_sees(*q, *key) for key in pairs] for q in pairs])
    assert torch.equal(mine, chain_visible(e.anchor, e.depth, e.anchor, e.depth))


def test_a_position_causal_mask_shows_the_tokens_the_chain_drafts():
    # Query (a, d) sits at position a + d; key (a', 0) at a' and embeds x[a' + 1]. Causal by position, the latest
    # such key carries x[a + d + 1], the label of depth d - 1 of the same chain (it predicts x[a + d' + 2]).
    for a, d in ((1, 2), (0, 1), (5, 3)):
        token = ex.leaked_input_token(a, d)
        assert token == a + (d - 1) + 2 and not ex.chain_sees(a, d, a + d, 0)


@pytest.mark.parametrize("n, depths, r, r_min", [(1000, 8, 0.7, 0.2), (37, 5, 0.5, 0.1), (10, 1, 0.7, 0.2)])
def test_cod_kept_elements_matches_a_draw(n, depths, r, r_min):
    from peagle_lab.train.cod import CODConfig, sample_elements

    cod = CODConfig(depths, r, r_min)
    assert ex.cod_kept_elements(n, depths, r, r_min) == sum(cod.quota(n, d) for d in range(depths))
    # A real draw over n anchors keeps the quota, less a few chains that run off the sequence's end.
    drawn = sample_elements(n + 2, torch.ones(n + 2, dtype=torch.bool), cod, torch.Generator().manual_seed(0))
    assert ex.cod_kept_elements(n, depths, r, r_min) - depths <= len(drawn) <= ex.cod_kept_elements(n, depths, r, r_min)


# ---------------------------------------------------------------- notebook 5
def test_speedup_at_equal_acceptance_uses_one_verify_time():
    from peagle_lab.bench.schema import BenchRow

    def row(method, verify, draft):
        return BenchRow(method, 3, 1, "chat", 0.0, 10.0, 1.0, 1.5, [0.5, 0.0, 0.0], 4, 2, verify, 1.0, draft, 32)

    assert ex.speedup_at_equal_acceptance(row("peagle", 10.0, 2.0), row("eagle3", 10.0, 6.0)) == pytest.approx(17 / 13)
    # The verify pass is the same work for both: noise in it must not favour either method.
    assert ex.speedup_at_equal_acceptance(row("peagle", 9.0, 4.0), row("eagle3", 11.0, 4.0)) == pytest.approx(1.0)


# ---------------------------------------------------------------- notebook 6
def test_train_tiny_heads_returns_engine_reports():
    out = ex.train_tiny_heads(("peagle",), steps=20, k=2)
    (report,) = out["peagle"]
    assert report.method == "peagle" and report.k == 2 and report.num_prompts == 32
    assert report.acceptance_length >= 1.0 and len(report.per_position_acceptance) == 2

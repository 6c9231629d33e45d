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


def test_predicted_tps_one_pass_vs_k_passes():
    kw = dict(verify_ms=20.0, pass_ms=3.0, alpha=0.7)
    assert ex.predicted_tokens_per_second("eagle3", k=1, **kw) == ex.predicted_tokens_per_second("peagle", k=1, **kw)
    for k in (2, 5, 9):
        assert ex.predicted_tokens_per_second("peagle", k=k, **kw) > ex.predicted_tokens_per_second("eagle3", k=k, **kw)
    # With free drafting, both reduce to AL / verify time.
    free = ex.predicted_tokens_per_second("eagle3", verify_ms=10.0, pass_ms=0.0, k=4, alpha=0.5)
    assert free == pytest.approx(1000 * ex.expected_acceptance_length(0.5, 4) / 10.0)
    with pytest.raises(ValueError):
        ex.predicted_tokens_per_second("medusa", k=3, **kw)


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
def test_leaky_mask_breaks_the_partition_check():
    from peagle_lab.lab.train_walkthrough import partition_gradient_check

    leaky = partition_gradient_check((2,), mask=ex.leaky_chain_mask)
    assert leaky[2]["max_grad_rel_error"] > 1e-2  # the segments no longer see what one pass sees


def test_leaky_mask_adds_exactly_the_cross_chain_keys():
    from peagle_lab.train.mask import chain_mask

    a = torch.tensor([[0, 1, 2, 0, 1]])
    d = torch.tensor([[0, 0, 0, 1, 1]])
    valid = torch.ones(1, 5, dtype=torch.bool)
    good, bad = chain_mask(a, d, a, d, valid)[0, 0], ex.leaky_chain_mask(a, d, a, d, valid)[0, 0]
    assert torch.equal(good & bad, good)  # the leak only adds keys
    # Elements a0d0 a1d0 a2d0 a0d1 a1d1: later anchors now see the depth-1 drafts of earlier chains.
    assert (bad & ~good).nonzero().tolist() == [[1, 3], [2, 3], [2, 4], [4, 3]]


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

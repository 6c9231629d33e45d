"""Sequence partitioning: segments are self-contained, and the sums equal the single pass."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from peagle_lab.testing import tiny_drafter, tiny_target, token_example as Ex
from peagle_lab.train.cod import CODConfig, sample_elements
from peagle_lab.train.partition import partition, segment_bounds
from peagle_lab.train.peagle import PEagleTrainConfig, peagle_step
from peagle_lab.train.targets import collate, compute_targets
from peagle_lab.train.vocab import draft_to_target_ids


@given(length=st.integers(0, 50), start=st.integers(0, 50), S=st.integers(1, 6), seed=st.integers(0, 1000))
def test_segments_hold_all_they_need_and_split_the_loss(length, start, S, seed):
    e = sample_elements(length, torch.arange(length) >= start, CODConfig(6, 0.6, 0.2),
                        torch.Generator().manual_seed(seed))
    segs = partition(e, S)
    assert len(segs) <= S
    owner = torch.zeros(len(e), dtype=torch.long)
    for s in segs:
        owner[s.index[s.has_loss]] += 1
        members = {(a, d) for a, d in zip(e.anchor[s.index].tolist(), e.depth[s.index].tolist())}
        for a, d in zip(e.anchor[s.index][s.has_loss].tolist(), e.depth[s.index][s.has_loss].tolist()):
            assert s.lo <= a < s.hi
            assert all((c, 0) in members for c in range(a + 1))  # its whole context is recomputed
            assert all((a, j) in members for j in range(d + 1))  # and its whole chain
    assert torch.equal(owner, e.has_loss.long())  # every loss-bearing element: exactly one segment
    bounds = segment_bounds(e, S)
    assert all(hi > lo for lo, hi in bounds) and all(b[1] == c[0] for b, c in zip(bounds, bounds[1:]))


def test_segments_shrink_the_largest_pass():
    L = 400
    e = sample_elements(L, torch.ones(L, dtype=torch.bool), CODConfig(8), torch.Generator().manual_seed(0))
    biggest = {S: max(len(s.index) for s in partition(e, S)) for S in (1, 2, 4)}
    assert biggest[1] == len(e)
    assert biggest[4] < 0.6 * biggest[1]  # the attention mask is quadratic in this: ≥ 2.7x smaller


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(0)
    target = tiny_target(seed=1)
    lengths, starts = (41, 29, 17), (9, 5, 3)
    exs = [Ex(torch.randint(3, 96, (n,)).tolist(), s) for n, s in zip(lengths, starts)]
    d = tiny_drafter(target, "peagle", num_hidden_layers=2, seed=7, draft_vocab_size=80).train()
    tb = compute_targets(target, collate(exs, 64), draft_to_target_ids(d))
    return target, tb


def run(batch, S, seed=11):
    target, tb = batch
    d = tiny_drafter(target, "peagle", num_hidden_layers=2, seed=7, draft_vocab_size=80).train()
    res = peagle_step(d, tb, PEagleTrainConfig(CODConfig(8, 0.7, 0.2), S), torch.Generator().manual_seed(seed))
    return res, {k: p.grad.clone() for k, p in d.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("S", [1, 2, 4])
def test_partitioned_loss_and_gradients_equal_single_pass(batch, S):
    ref, ref_grads = run(batch, 1)
    got, grads = run(batch, S)
    assert got.num_loss == ref.num_loss and got.depth_count == ref.depth_count
    assert abs(got.loss - ref.loss) <= 1e-4 * abs(ref.loss)
    assert set(grads) == set(ref_grads)
    assert {"mask_hidden", "mask_embedding", "fc.weight", "layers.1.self_attn.k_proj.weight"} <= set(grads)
    for name, g in grads.items():
        rel = float((g - ref_grads[name]).norm() / ref_grads[name].norm().clamp(min=1e-12))
        assert rel <= 1e-4, f"{name}: relative gradient error {rel:.2e} at S={S}"
    if S > 1:
        assert got.num_elements > ref.num_elements  # the recomputed context is real work

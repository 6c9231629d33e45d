"""COD sampling: complete chains, the quotas, and reproducibility."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from peagle_lab.train.cod import CODConfig, sample_elements


@given(length=st.integers(0, 60), start=st.integers(0, 60), depths=st.integers(1, 10),
       r=st.floats(0.05, 1.0), r_min=st.floats(0.0, 1.0), seed=st.integers(0, 2**31))
def test_chains_are_conditional_and_quotas_hold(length, start, depths, r, r_min, seed):
    mask = torch.arange(length) >= start  # assistant tokens from `start` on
    cfg = CODConfig(depths, r, r_min)
    e = sample_elements(length, mask, cfg, torch.Generator().manual_seed(seed))
    kept = {(a, d) for a, d in zip(e.anchor.tolist(), e.depth.tolist())}
    assert len(kept) == len(e)  # no duplicates
    for a, d in kept:
        if d > 0:
            assert (a, d - 1) in kept  # a depth-d element exists only if its parent does
            assert a + d + 2 < length and mask[a + d + 2]  # deep elements always carry a loss
    depth0 = sorted(a for a, d in kept if d == 0)
    assert depth0 == list(range(max(length - 2, 0)))  # every anchor at depth 0
    n = int(e.has_loss[e.depth == 0].sum())
    counts = e.counts()
    for d in range(1, len(counts)):
        assert counts[d] <= cfg.quota(n, d)
    # has_loss is exactly "the target token is an assistant token"
    for a, d, hl in zip(e.anchor.tolist(), e.depth.tolist(), e.has_loss.tolist()):
        assert hl == bool(mask[a + d + 2])


def test_quota_is_met_when_candidates_allow():
    L = 200
    e = sample_elements(L, torch.ones(L, dtype=torch.bool), CODConfig(8, 0.7, 0.2), torch.Generator().manual_seed(0))
    n, cfg = L - 2, CODConfig(8, 0.7, 0.2)
    counts = e.counts()
    assert counts[0] == n
    for d in range(1, 8):
        # only the last few anchors can lack a token d + 2 ahead, so the quota is (nearly) met
        assert cfg.quota(n, d) - d <= counts[d] <= cfg.quota(n, d)
    assert [cfg.quota(n, d) for d in range(8)] == [198, 139, 98, 68, 48, 40, 40, 40]  # r_min floors depth 5+


def test_same_seed_same_draw_and_positions():
    mask = torch.ones(50, dtype=torch.bool)
    a = sample_elements(50, mask, CODConfig(), torch.Generator().manual_seed(3))
    b = sample_elements(50, mask, CODConfig(), torch.Generator().manual_seed(3))
    c = sample_elements(50, mask, CODConfig(), torch.Generator().manual_seed(4))
    assert torch.equal(a.anchor, b.anchor) and torch.equal(a.depth, b.depth)
    assert not torch.equal(a.anchor, c.anchor)
    assert torch.equal(a.positions, a.anchor + a.depth)
    assert torch.equal(a.target_rows, a.anchor + a.depth + 1)


@pytest.mark.parametrize("kw, word", [({"num_depths": 0}, "num_depths"), ({"ratio": 0.0}, "ratio"),
                                      ({"ratio": 1.5}, "ratio"), ({"ratio_min": -0.1}, "ratio_min")])
def test_config_names_the_bad_value(kw, word):
    with pytest.raises(ValueError, match=word):
        CODConfig(**kw)

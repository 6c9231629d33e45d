"""The chain-visibility mask against a brute-force reading of its definition."""
from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from peagle_lab.train.mask import chain_mask, chain_visible


def brute_force(elements, valid=None):
    """mask[q][k] by the sentence in DESIGN.md, one pair at a time."""
    n = len(elements)
    valid = valid or [True] * n
    out = [[False] * n for _ in range(n)]
    for qi, (aq, dq) in enumerate(elements):
        for ki, (ak, dk) in enumerate(elements):
            sees_context = dk == 0 and ak <= aq  # a depth-0 key whose anchor is not after ours
            own_chain = ak == aq and 1 <= dk <= dq  # an earlier depth of our chain (or ourselves)
            out[qi][ki] = valid[ki] and (sees_context or own_chain)
    for row in out:  # a query that sees nothing sees everything (padding rows only)
        if not any(row):
            row[:] = [True] * n
    return out


elements_st = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), min_size=1, max_size=14, unique=True)


@given(elements_st, st.randoms(use_true_random=False))
def test_mask_matches_brute_force(elements, rnd):
    valid = [rnd.random() < 0.85 for _ in elements]
    a = torch.tensor([[e[0] for e in elements]])
    d = torch.tensor([[e[1] for e in elements]])
    got = chain_mask(a, d, a, d, torch.tensor([valid]))[0, 0]
    assert got.tolist() == brute_force(elements, valid)


def test_small_table():
    # anchors 0..2 at depth 0, then the depth-1 and depth-2 drafts of anchor 1
    a = torch.tensor([0, 1, 2, 1, 1])
    d = torch.tensor([0, 0, 0, 1, 2])
    assert chain_visible(a, d, a, d).int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 0, 1, 0],  # depth 1 of anchor 1: context ≤ 1 and itself, not anchor 2
        [1, 1, 0, 1, 1],  # depth 2 of anchor 1: also its depth-1 parent
    ]


def test_padding_keys_hidden_and_no_empty_rows():
    a = torch.tensor([[0, 1, 0]])
    d = torch.tensor([[0, 0, 0]])
    valid = torch.tensor([[True, True, False]])
    m = chain_mask(a, d, a, d, valid)[0, 0]
    assert not m[:2, 2].any()  # real queries never see the padding key
    assert m.any(-1).all()  # every row sees something, so softmax never yields NaN


def test_queries_and_keys_may_differ():
    # EAGLE-3's TTT step 1: queries at depth 1, keys = step 0 and step 1 of the same anchors
    n = 3
    aq, dq = torch.arange(n)[None], torch.ones(1, n, dtype=torch.long)
    ak = torch.arange(n).repeat(2)[None]
    dk = torch.tensor([[0] * n + [1] * n])
    m = chain_mask(aq, dq, ak, dk, torch.ones(1, 2 * n, dtype=torch.bool))[0, 0].int()
    assert m.tolist() == [[1, 0, 0, 1, 0, 0], [1, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 1]]

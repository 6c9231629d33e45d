"""Draft vocabulary: the most frequent ids, offsets that map back, and what the drafter sees."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from peagle_lab.testing import tiny_drafter, tiny_target
from peagle_lab.train.vocab import apply_draft_vocab, build_draft_vocab, count_tokens, draft_to_target_ids


@given(st.lists(st.integers(0, 50), min_size=2, max_size=80), st.data())
def test_vocab_keeps_the_most_frequent_ids(counts, data):
    V = len(counts)
    vd = data.draw(st.integers(1, V))
    always = data.draw(st.lists(st.integers(0, V - 1), max_size=min(vd, 3), unique=True))
    v = build_draft_vocab(torch.tensor(counts), vd, always)
    ids = v.draft_to_target.tolist()
    assert ids == sorted(set(ids)) and len(ids) == vd  # ascending, distinct, exactly Vd
    assert set(always) <= set(ids)
    assert torch.equal(torch.arange(vd) + v.d2t, v.draft_to_target) and bool((v.d2t >= 0).all())
    assert int(v.t2d.sum()) == vd and v.t2d[v.draft_to_target].all()
    # nothing left out is more frequent than something kept (apart from the forced ids)
    free = [i for i in ids if i not in always]
    if free:
        left_out = [counts[i] for i in range(V) if i not in ids]
        assert max(left_out, default=-1) <= min(counts[i] for i in free)
    total = sum(counts)
    assert v.coverage == pytest.approx(sum(counts[i] for i in ids) / total if total else 1.0)


def test_counts_only_the_assistant_part():
    class Ex:
        input_ids, assistant_start = [5, 5, 5, 7, 8, 8], 3

    assert count_tokens([Ex()], 10).tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 2, 0]
    assert count_tokens([Ex()], 10, assistant_only=False)[5] == 3


def test_drafter_maps_its_ids_back_to_the_target():
    target = tiny_target()
    d = tiny_drafter(target, "eagle3", draft_vocab_size=40)
    v = build_draft_vocab(torch.arange(96) % 11, 40, always=[2])
    apply_draft_vocab(d, v)
    assert torch.equal(draft_to_target_ids(d), v.draft_to_target)
    assert torch.equal(d.to_target_ids(torch.tensor([0, 39])), v.draft_to_target[[0, 39]])
    assert torch.equal(d.t2d, v.t2d)


@pytest.mark.parametrize("size", [0, 97])
def test_bad_sizes_are_refused(size):
    with pytest.raises(ValueError, match="draft_vocab_size"):
        build_draft_vocab(torch.ones(96), size)


def test_vocab_must_fit_the_drafter():
    d = tiny_drafter(tiny_target(), "eagle3", draft_vocab_size=40)
    with pytest.raises(ValueError, match="draft_vocab_size=40"):
        apply_draft_vocab(d, build_draft_vocab(torch.ones(96), 30))

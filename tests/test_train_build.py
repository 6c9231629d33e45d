"""A fresh drafter: shaped for the target, vocabulary applied, warm-started from the target's head."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.drafter import check_drafter_fits
from peagle_lab.testing import tiny_target
from peagle_lab.train.build import new_drafter
from peagle_lab.train.vocab import build_draft_vocab, draft_to_target_ids


@pytest.mark.parametrize("method, layers", [("eagle3", 1), ("peagle", 3)])
def test_new_drafter(method, layers):
    target = tiny_target()
    vocab = build_draft_vocab(torch.arange(96) % 13, 48, always=[2])
    d = new_drafter(target, method, layers, vocab, seed=4, init_from_target=True)
    check_drafter_fits(d, target, method)
    assert d.config.num_hidden_layers == layers and d.dtype == torch.float32
    assert torch.equal(draft_to_target_ids(d), vocab.draft_to_target)
    assert torch.equal(d.lm_head.weight, target.lm_head.weight[vocab.draft_to_target])
    assert torch.equal(d.norm.weight, target.norm.weight)
    same = new_drafter(target, method, layers, vocab, seed=4)
    assert torch.equal(same.fc.weight, d.fc.weight)  # seeded
    assert not torch.equal(same.lm_head.weight, d.lm_head.weight)  # random head by default
    if method == "peagle":
        assert torch.equal(d.mask_embedding, target.embed_tokens.weight[d.config.mask_token_id])


def test_vocab_of_another_target_is_refused():
    with pytest.raises(ValueError, match="96"):
        new_drafter(tiny_target(), "eagle3", 1, build_draft_vocab(torch.ones(50), 10))


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_a_grown_draft_vocabulary_keeps_every_old_logit_and_starts_new_ids_at_zero(method):
    """A warm start that grows the draft vocabulary: the old ids score exactly as before, new ids get logit 0."""
    from peagle_lab.train.build import grow_draft_vocab

    target = tiny_target()
    V = target.config.vocab_size
    drafter = new_drafter(target, method, 2, build_draft_vocab(torch.arange(V) % 7, 32, always=[2]), seed=1)
    counts = torch.arange(V)  # the new ids are the most frequent others: the highest ids
    grown, vocab = grow_draft_vocab(drafter, counts, 48, always=[2])
    check_drafter_fits(grown, target, method)
    old, new = draft_to_target_ids(drafter), draft_to_target_ids(grown)
    assert grown.config.draft_vocab_size == 48 and torch.equal(new, vocab.draft_to_target)
    assert set(old.tolist()) < set(new.tolist()) and torch.equal(new, new.sort().values)
    added = sorted(set(new.tolist()) - set(old.tolist()))
    assert added == sorted([i for i in reversed(range(V)) if i not in set(old.tolist())][:16])  # by count
    hidden = torch.randn(5, target.config.hidden_size)
    logits_old = drafter.lm_head(drafter.norm(hidden))
    logits_new = grown.lm_head(grown.norm(hidden))
    at = torch.searchsorted(new, old)
    assert torch.equal(logits_new[:, at], logits_old)  # the same scores for the ids it had
    rest = torch.ones(48, dtype=torch.bool)
    rest[at] = False
    assert torch.count_nonzero(logits_new[:, rest]) == 0  # the new ids start at logit 0
    for name, p in drafter.state_dict().items():
        if name not in ("lm_head.weight", "d2t", "t2d"):
            assert torch.equal(grown.state_dict()[name], p), name  # every other weight carries over
    assert grow_draft_vocab(drafter, counts, 32)[0] is drafter  # the same size: nothing to grow
    with pytest.raises(ValueError, match="draft_vocab_size=16 is smaller than the head's 32"):
        grow_draft_vocab(drafter, counts, 16)
    with pytest.raises(ValueError, match=f"draft_vocab_size={V + 1} is out of range"):
        grow_draft_vocab(drafter, counts, V + 1)


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_widened_mlps_compute_what_the_head_computed(method):
    """A warm start that widens the MLPs: every layer's MLP gives the same output, every other weight carries over."""
    from peagle_lab.train.build import grow_intermediate

    target = tiny_target()
    drafter = new_drafter(target, method, 2, build_draft_vocab(torch.arange(96) % 7, 32), seed=1)
    width = drafter.config.intermediate_size
    grown = grow_intermediate(drafter, width + 40, seed=3)
    check_drafter_fits(grown, target, method)
    assert grown.config.intermediate_size == width + 40
    x = torch.randn(3, 5, target.config.hidden_size)
    for old, new in zip(drafter.layers, grown.layers):
        assert torch.allclose(new.mlp(x), old.mlp(x), rtol=0, atol=1e-6)
        assert torch.count_nonzero(new.mlp.down_proj.weight[:, width:]) == 0  # new units add nothing yet
        assert torch.count_nonzero(new.mlp.gate_proj.weight[width:]) > 0  # but they have inputs to learn from
    grown_state = grown.state_dict()
    for name, p in drafter.state_dict().items():
        if ".mlp." not in name:
            assert torch.equal(grown_state[name], p), name
    assert grow_intermediate(drafter, width) is drafter  # the same width: nothing to grow
    with pytest.raises(ValueError, match=f"intermediate_size={width - 1} is smaller than the head's {width}"):
        grow_intermediate(drafter, width - 1)


def test_a_fresh_drafter_takes_its_own_mlp_width():
    d = new_drafter(tiny_target(), "peagle", 1, build_draft_vocab(torch.arange(96), 32), intermediate_size=24)
    assert d.config.intermediate_size == 24 and tuple(d.layers[0].mlp.up_proj.weight.shape) == (24, 64)

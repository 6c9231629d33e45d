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

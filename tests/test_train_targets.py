"""Target taps and logits for the loss: padding-invariant, and the cache returns the same."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.testing import tiny_target, token_example as Ex
from peagle_lab.train.targets import TargetCache, cache_targets, collate, compute_targets


@pytest.fixture(scope="module")
def setup():
    target = tiny_target(seed=2)
    g = torch.Generator().manual_seed(0)
    exs = [Ex(torch.randint(3, 96, (n,), generator=g).tolist(), s) for n, s in ((12, 4), (7, 2), (20, 10))]
    return target, exs, torch.tensor([2, 5, 9, 30, 64, 95])


def test_padding_does_not_change_real_rows(setup):
    target, exs, draft_ids = setup
    tb = compute_targets(target, collate(exs, 64), draft_ids)
    for b, e in enumerate(exs):
        n = len(e.input_ids)
        alone = target(torch.tensor([e.input_ids]), torch.arange(n)[None])
        assert torch.allclose(tb.taps[b, :n], alone.taps[0], atol=1e-5)
        assert torch.allclose(tb.logits[b, :n], alone.logits[0][:, draft_ids], atol=1e-4)
        assert torch.equal(tb.argmax[b, :n], alone.logits[0].argmax(-1))
        assert tb.tokens.loss_mask[b].nonzero()[:, 0].tolist() == list(range(e.assistant_start, n))


def test_collate_cuts_long_sequences():
    b = collate([Ex(list(range(3, 40)), 30)], 16)
    assert b.input_ids.shape == (1, 16) and int(b.lengths[0]) == 16 and not b.loss_mask.any()
    with pytest.raises(ValueError, match="max_seq_len"):
        collate([Ex([1, 2, 3], 0)], 2)


def test_cache_round_trip_equals_online(setup, tmp_path):
    target, exs, draft_ids = setup
    cache_targets(target, exs, tmp_path, max_seq_len=64, batch_size=2, shard_rows=1)
    assert len(list(tmp_path.glob("targets-*.safetensors"))) == 3  # one example per shard here
    cache = TargetCache(tmp_path)
    idx = [2, 0]
    tokens = collate([exs[i] for i in idx], 64)
    got = cache.batch(idx, tokens, target.lm_head, draft_ids)
    want = compute_targets(target, tokens, draft_ids)
    for b, i in enumerate(idx):
        n = len(exs[i].input_ids)
        assert torch.allclose(got.taps[b, :n], want.taps[b, :n], atol=1e-5)  # batched differently
        assert torch.allclose(got.logits[b, :n], want.logits[b, :n], atol=1e-5)
        assert torch.equal(got.argmax[b, :n], want.argmax[b, :n])

"""EAGLE-3 training-time test: the unroll reproduces inference drafting, and a few steps learn."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.drafting import draft_autoregressive
from peagle_lab.testing import tiny_drafter, tiny_target, token_example as Ex
from peagle_lab.train.eagle3 import Eagle3TrainConfig, eagle3_step, ttt_unroll
from peagle_lab.train.targets import collate, compute_targets
from peagle_lab.train.vocab import apply_draft_vocab, build_draft_vocab, draft_to_target_ids


@pytest.fixture(scope="module")
def models():
    target = tiny_target(seed=4)
    drafter = tiny_drafter(target, "eagle3", num_hidden_layers=2, seed=6, draft_vocab_size=70)
    apply_draft_vocab(drafter, build_draft_vocab(torch.arange(96) % 7, 70))
    return target, drafter


@pytest.mark.parametrize("k", [1, 3, 5])
def test_unroll_reproduces_autoregressive_drafting(models, k):
    """Step j of anchor T-1, fed the drafted tokens, gives the drafter's j-th distribution."""
    target, drafter = models
    T = 8
    prompt = torch.tensor([[9, 4, 77, 31, 31, 12, 50, 6]])
    bonus = torch.tensor([44])
    pos = torch.arange(T)[None]
    taps = target(prompt, pos).taps
    max_len = T + k + 2
    with torch.no_grad():
        res = draft_autoregressive(drafter, drafter.allocate_cache(1, max_len), taps, prompt, pos,
                                   torch.tensor([T - 1]), bonus, k=k, max_len=max_len, temperature=1.0,
                                   generator=torch.Generator().manual_seed(1), backend="torch")
    seq = prompt[0].tolist() + [int(bonus)] + res.tokens[0].tolist() + [3]  # what the drafter fed itself
    tb = compute_targets(target, collate([Ex(seq, 0)], 64), draft_to_target_ids(drafter))
    with torch.no_grad():
        steps = ttt_unroll(drafter, tb, k)
    draft_ids = draft_to_target_ids(drafter)
    for j, (hidden, *_rest) in enumerate(steps):
        probs = torch.softmax(drafter.lm_head(drafter.norm(hidden[0, T - 1])), -1)
        assert torch.allclose(probs, res.draft_probs[0, j, draft_ids], atol=1e-5), f"step {j}"


def test_later_steps_depend_on_the_fed_back_hidden_state(models):
    target, drafter = models
    tb = compute_targets(target, collate([Ex(list(range(3, 25)), 4)], 64), draft_to_target_ids(drafter))
    with torch.no_grad():
        a = ttt_unroll(drafter, tb, 3)
        drafter.fc.weight.mul_(1.5)  # changes step 0's input and therefore every later step
        b = ttt_unroll(drafter, tb, 3)
        drafter.fc.weight.div_(1.5)
    assert all(not torch.allclose(x[0], y[0]) for x, y in zip(a, b))


def test_a_few_steps_fit_a_batch(models):
    target, _ = models
    torch.manual_seed(0)
    exs = [Ex(torch.randint(3, 96, (n,)).tolist(), n // 3) for n in (30, 22, 14)]
    drafter = tiny_drafter(target, "eagle3", num_hidden_layers=1, seed=2).train()
    tb = compute_targets(target, collate(exs, 64), draft_to_target_ids(drafter))
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    losses = []
    for _ in range(12):
        r = eagle3_step(drafter, tb, Eagle3TrainConfig(ttt_steps=4))
        opt.step()
        opt.zero_grad()
        losses.append(r.loss)
    assert losses[-1] < 0.8 * losses[0]
    assert len(r.depth_loss) == 4 and all(c > 0 for c in r.depth_count)
    # each step trains the same anchors minus those whose label runs off the end
    assert list(r.depth_count) == sorted(r.depth_count, reverse=True)


def test_config_names_the_bad_value():
    with pytest.raises(ValueError, match="ttt_steps"):
        Eagle3TrainConfig(ttt_steps=0)

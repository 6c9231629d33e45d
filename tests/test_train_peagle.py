"""P-EAGLE training: the training layout is the inference layout, and a few steps learn."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.drafting import draft_parallel
from peagle_lab.testing import tiny_drafter, tiny_target, token_example as Ex
from peagle_lab.train.cod import CODConfig, Elements
from peagle_lab.train.partition import Segment
from peagle_lab.train.peagle import PEagleTrainConfig, build_slots, peagle_step
from peagle_lab.train.targets import collate, compute_targets
from peagle_lab.train.vocab import apply_draft_vocab, build_draft_vocab, draft_to_target_ids


@pytest.fixture(scope="module")
def models():
    target = tiny_target(seed=3)
    drafter = tiny_drafter(target, "peagle", num_hidden_layers=2, seed=5, draft_vocab_size=70)
    apply_draft_vocab(drafter, build_draft_vocab(torch.arange(96).flip(0), 70))  # a non-trivial d2t
    return target, drafter


@pytest.mark.parametrize("k", [1, 4])
def test_training_slots_reproduce_the_inference_draft(models, k):
    """Depth d of anchor T-1 in training = the d-th draft after a prefill of T tokens."""
    target, drafter = models
    T, V = 9, target.config.vocab_size
    prompt = torch.tensor([[5, 17, 33, 8, 60, 61, 2, 40, 11]])
    bonus = torch.tensor([27])
    pos = torch.arange(T)[None]
    taps = target(prompt, pos).taps
    max_len = T + k + 2
    cache = drafter.allocate_cache(1, max_len)
    with torch.no_grad():
        res = draft_parallel(drafter, cache, taps, prompt, pos, torch.tensor([T - 1]), bonus, k=k, max_len=max_len,
                             temperature=1.0, generator=torch.Generator().manual_seed(0), backend="torch")
    # Training view: the sequence continues with the bonus token; elements are all context
    # anchors 0..T-1 at depth 0 plus the chain of anchor T-1.
    seq = prompt[0].tolist() + [int(bonus)] + [3] * (k + 1)
    tb = compute_targets(target, collate([Ex(seq, 0)], 64), draft_to_target_ids(drafter))
    anchor = torch.cat([torch.arange(T), torch.full((k - 1,), T - 1)])
    depth = torch.cat([torch.zeros(T, dtype=torch.long), torch.arange(1, k)])
    e = Elements(anchor, depth, torch.ones(len(anchor), dtype=torch.bool))
    sb = build_slots(drafter, tb, [e], [Segment(torch.arange(len(e)), e.has_loss, 0, T)])
    with torch.no_grad():
        out = drafter(sb.input_ids, sb.hidden, sb.positions, attn_mask=sb.attn_mask, return_logits=False)
        rows = torch.tensor([T - 1] + list(range(T, T + k - 1)))  # (T-1, 0), (T-1, 1), ...
        probs = torch.softmax(drafter.lm_head(drafter.norm(out.hidden[0, rows])), -1)  # [k, Vd]
    draft_ids = draft_to_target_ids(drafter)
    assert torch.allclose(probs, res.draft_probs[0][:, draft_ids], atol=1e-5)
    assert float(res.draft_probs[0].sum(-1).sub(1).abs().max()) < 1e-5  # nothing lives outside the draft vocab


def test_a_few_steps_fit_a_batch_and_train_the_mask_parameters(models):
    target, _ = models
    torch.manual_seed(0)
    exs = [Ex(torch.randint(3, 96, (n,)).tolist(), n // 3) for n in (30, 22, 14)]
    drafter = tiny_drafter(target, "peagle", num_hidden_layers=1, seed=2).train()
    tb = compute_targets(target, collate(exs, 64), draft_to_target_ids(drafter))
    mask_hidden0 = drafter.mask_hidden.detach().clone()
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    cfg = PEagleTrainConfig(CODConfig(8, 0.7, 0.2), num_segments=2)
    losses = []
    for step in range(12):
        r = peagle_step(drafter, tb, cfg, torch.Generator().manual_seed(step))
        opt.step()
        opt.zero_grad()
        losses.append(r.loss)
    assert losses[-1] < 0.8 * losses[0]
    assert len(r.depth_loss) == 8 and r.depth_count[0] > r.depth_count[-1] > 0
    assert not torch.equal(drafter.mask_hidden.detach(), mask_hidden0)  # mask_hidden is learned


def test_evaluation_pass_leaves_no_gradients(models):
    target, drafter = models
    tb = compute_targets(target, collate([Ex(list(range(3, 30)), 5)], 64), draft_to_target_ids(drafter))
    drafter.zero_grad(set_to_none=True)
    with torch.no_grad():
        r = peagle_step(drafter, tb, PEagleTrainConfig(), torch.Generator().manual_seed(0), backward=False)
    assert r.num_loss > 0 and all(p.grad is None for p in drafter.parameters())


def test_eagle3_drafter_is_refused(models):
    target, _ = models
    d = tiny_drafter(target, "eagle3")
    tb = compute_targets(target, collate([Ex(list(range(3, 12)), 2)], 64), draft_to_target_ids(d))
    with pytest.raises(ValueError, match="P-EAGLE"):
        peagle_step(d, tb, PEagleTrainConfig())

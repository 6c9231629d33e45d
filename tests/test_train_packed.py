"""The fast packed-row training path against the per-sequence reference it replaces.

The reference (``peagle_step``, ``eagle3_step``: padded batches, explicit masks, boolean
indexing) is the spec. The packed path (several sequences a row, fixed shapes, masks as
flex ``mask_mod`` functions) must give the same loss and the same gradients when it trains
the same elements, and its masks must say what ``mask.chain_visible`` says.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from peagle_lab.testing import tiny_drafter, tiny_target, token_example as Ex
from peagle_lab.train.cod import CODConfig, packed_quotas, sample_packed
from peagle_lab.train.eagle3 import Eagle3TrainConfig, eagle3_step
from peagle_lab.train.mask import build_mask, chain_mod, chain_visible, doc_causal_mod, ttt_masks, ttt_mod
from peagle_lab.train.objective import DraftObjective, StepBuilder
from peagle_lab.train.pack import pack_examples
from peagle_lab.train.peagle import PEagleTrainConfig, peagle_step
from peagle_lab.train.targets import collate, compute_targets, packed_targets
from peagle_lab.train.vocab import apply_draft_vocab, build_draft_vocab, draft_to_target_ids

SEQS = [[5, 17, 33, 8, 60, 61, 2, 40, 11, 7, 9], [12, 13, 14, 15, 70, 71], [33, 4, 4, 81, 19, 3, 22, 50]]


def packed_step(target, drafter, rows, method, k, decay=1.0, cod=None, top1_weight=0.0):
    """(loss, grads, stats) of one packed step on ``rows`` (dense masks, float32)."""
    B, T = rows.input_ids.shape
    cod = cod or CODConfig(k, 1.0, 1.0)
    builder = StepBuilder(method, B, T, cod, decay, 1.0, "cpu", block=False)
    targets = packed_targets(target, rows.input_ids, rows.positions, builder.target_mask(rows),
                             draft_to_target_ids(drafter), drafter.t2d)
    inp = builder.inputs(rows, targets, torch.Generator().manual_seed(0))
    drafter.zero_grad()
    objective = DraftObjective(drafter, k, top1_weight)
    loss, stats = objective(rows.input_ids, rows.positions, rows.doc, rows.loss_mask, targets.taps, targets.probs,
                            targets.argmax, inp.anchor, inp.depth, inp.label_row, inp.valid, inp.weight, inp.mask)
    loss = loss / inp.weight.sum()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in drafter.named_parameters() if p.grad is not None}, stats, inp


def reference_step(target, drafter, method, k):
    tb = compute_targets(target, collate([Ex(s, 0) for s in SEQS], 64), draft_to_target_ids(drafter))
    drafter.zero_grad()
    if method == "peagle":
        r = peagle_step(drafter, tb, PEagleTrainConfig(CODConfig(k, 1.0, 1.0)), torch.Generator().manual_seed(0))
    else:
        r = eagle3_step(drafter, tb, Eagle3TrainConfig(k))
    return r.loss, {n: p.grad.clone() for n, p in drafter.named_parameters() if p.grad is not None}, r


@pytest.mark.parametrize("method, layers", [("peagle", 1), ("peagle", 2), ("eagle3", 1), ("eagle3", 2)])
def test_packed_rows_equal_the_reference_loss_and_gradients(method, layers):
    """All three sequences in one row (and in rows of their own) train exactly like padded batches."""
    target = tiny_target(seed=3)
    drafter = tiny_drafter(target, method, num_hidden_layers=layers, seed=5).train()
    k = 4
    want_loss, want_grads, ref = reference_step(target, drafter, method, k)
    for row_len in (32, 12):  # one row holding every sequence; a row each (with padding)
        rows = pack_examples([Ex(s, 0) for s in SEQS], row_len)
        assert len(rows) == (1 if row_len == 32 else 3)
        loss, grads, stats, _ = packed_step(target, drafter, rows, method, k)
        assert abs(float(loss) - want_loss) < 1e-5
        assert grads.keys() == want_grads.keys()
        for name, g in grads.items():
            torch.testing.assert_close(g, want_grads[name], atol=2e-6, rtol=1e-4, msg=name)
        # the same elements carry the loss, depth by depth
        assert stats[0].long().tolist() == list(ref.depth_count)


def test_packed_target_equals_one_sequence_at_a_time():
    target = tiny_target(seed=1)
    rows = pack_examples([Ex(s, 2) for s in SEQS], 32)
    mask = build_mask(doc_causal_mod(rows.doc), 1, 32, 32, "cpu", block=False)
    taps = target(rows.input_ids, rows.positions, attn_mask=mask).taps
    at = 0
    for s in SEQS:
        alone = target(torch.tensor([s]), torch.arange(len(s))[None]).taps
        torch.testing.assert_close(taps[:, at:at + len(s)], alone, atol=1e-5, rtol=1e-5)
        at += len(s)


def test_depth_weights_and_out_of_vocabulary_labels():
    """Depth d weighs decay**d; a label the draft vocabulary lacks carries no loss."""
    target = tiny_target(seed=3)
    drafter = tiny_drafter(target, "eagle3", num_hidden_layers=1, seed=5, draft_vocab_size=48).train()
    apply_draft_vocab(drafter, build_draft_vocab(torch.arange(96), 48))  # ids 48..95 are out of vocabulary
    rows = pack_examples([Ex(s, 0) for s in SEQS], 32)
    loss, _, stats, inp = packed_step(target, drafter, rows, "eagle3", 3, decay=0.5)
    assert torch.equal(inp.weight.unique().sort().values, torch.tensor([0.0, 0.25, 0.5, 1.0]))
    labelled_out = inp.valid & (inp.weight == 0)
    assert labelled_out.any()  # some labelled elements predict a token outside the vocabulary ...
    # ... and exactly those: their target argmax is not a draft id
    t = packed_targets(target, rows.input_ids, rows.positions,
                       build_mask(doc_causal_mod(rows.doc), 1, 32, 32, "cpu", False), draft_to_target_ids(drafter),
                       drafter.t2d)
    assert torch.equal(labelled_out, inp.valid & ~t.in_vocab.gather(1, inp.label_row))
    # the summed loss per depth divided by the weight per depth is the same mean at every decay
    count, _, wce, w = stats
    _, _, stats1, _ = packed_step(target, drafter, rows, "eagle3", 3, decay=1.0)
    torch.testing.assert_close(wce / w, stats1[2] / stats1[3], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, stats1[3] * torch.tensor([1.0, 0.5, 0.25]))


def test_out_of_vocabulary_rows_get_no_gradient():
    target = tiny_target(seed=3)
    drafter = tiny_drafter(target, "peagle", num_hidden_layers=1, seed=5, draft_vocab_size=48).train()
    apply_draft_vocab(drafter, build_draft_vocab(torch.arange(96), 48))
    rows = pack_examples([Ex(s, 0) for s in SEQS], 32)
    builder = StepBuilder("peagle", 1, 32, CODConfig(3, 1.0, 1.0), 1.0, 1.0, "cpu", block=False)
    targets = packed_targets(target, rows.input_ids, rows.positions, builder.target_mask(rows),
                             draft_to_target_ids(drafter), drafter.t2d)
    inp = builder.inputs(rows, targets, None)
    hidden = torch.zeros(1, inp.anchor.shape[1], 64, requires_grad=True)
    from peagle_lab.train.loss import packed_scores

    ce, _, _ = packed_scores(drafter, hidden, targets.probs, targets.argmax, inp.label_row)
    (inp.weight * ce).sum().backward()
    no_loss = inp.weight[0] == 0
    assert no_loss.any() and (~no_loss).any()
    assert hidden.grad[0][no_loss].abs().max() == 0 and hidden.grad[0][~no_loss].abs().sum() > 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(3, 12), min_size=1, max_size=4), st.integers(0, 2 ** 16))
def test_packed_masks_follow_the_chain_rule(lengths, seed):
    """chain_mod / ttt_mod say what chain_visible says, inside each sequence, nothing across."""
    T = sum(lengths) + 2
    rows = pack_examples([Ex(list(range(3, 3 + n)), 1) for n in lengths], T)
    cod = CODConfig(4, 0.6, 0.3)
    anchor, depth = sample_packed(lambda a, d: rows.label_valid(a, d + 2), 1, packed_quotas(T, cod),
                                  torch.Generator().manual_seed(seed))
    doc = rows.doc.gather(1, anchor)
    got = build_mask(chain_mod(anchor, depth, doc), 1, anchor.shape[1], anchor.shape[1], "cpu", False)[0, 0]
    want = chain_visible(anchor[0], depth[0], anchor[0], depth[0]) & (doc[0][:, None] == doc[0][None, :])
    assert torch.equal(got, want)
    # EAGLE-3: queries are step j, keys steps 0..j stacked step-major
    K = 3
    ttt = build_mask(ttt_mod(rows.doc), 1, T, K * T, "cpu", False)[0, 0]
    a = torch.arange(T)
    ak, dk = a.repeat(K), torch.arange(K).repeat_interleave(T)
    for j in range(K):
        want = chain_visible(a, torch.full((T,), j), ak, dk) & (rows.doc[0][:, None] == rows.doc[0][ak][None, :])
        assert torch.equal(ttt[:, : (j + 1) * T], want[:, : (j + 1) * T])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(3, 20), min_size=1, max_size=5), st.integers(0, 2 ** 16), st.integers(2, 6))
def test_packed_cod_keeps_complete_chains_and_prefers_labelled_ones(lengths, seed, depths):
    T = sum(lengths) + 3
    rows = pack_examples([Ex(list(range(3, 3 + n)), n // 3) for n in lengths], T)
    cod = CODConfig(depths, 0.7, 0.2)
    quotas = packed_quotas(T, cod, 0.8)
    valid = lambda a, d: rows.label_valid(a, d + 2)  # noqa: E731
    anchor, depth = sample_packed(valid, 1, quotas, torch.Generator().manual_seed(seed))
    again = sample_packed(valid, 1, quotas, torch.Generator().manual_seed(seed))
    assert torch.equal(anchor, again[0]) and torch.equal(depth, again[1])
    assert torch.bincount(depth[0], minlength=depths).tolist() == quotas
    for d in range(1, depths):
        here, parents = anchor[0][depth[0] == d], anchor[0][depth[0] == d - 1]
        assert torch.isin(here, parents).all()  # every chain is complete
        assert torch.equal(here, here.sort().values) and len(set(here.tolist())) == len(here)
        ok_parents = valid(parents[None], d)[0]
        kept_ok = valid(here[None], d)[0]
        # a labelled candidate is never dropped while an unlabelled one is kept
        assert int(kept_ok.sum()) == min(len(here), int(ok_parents.sum()))


def test_block_masks_match_dense_masks_in_the_forward_pass():
    """flex_attention with block masks (the GPU path) = SDPA with dense masks (forward; CPU)."""
    target = tiny_target(seed=2)
    rows = pack_examples([Ex(s, 1) for s in SEQS * 3], 128)
    B, T = rows.input_ids.shape
    dense = build_mask(doc_causal_mod(rows.doc), B, T, T, "cpu", False)
    block = build_mask(doc_causal_mod(rows.doc), B, T, T, "cpu", True)
    with torch.no_grad():
        a = target(rows.input_ids, rows.positions, attn_mask=dense).taps
        b = target(rows.input_ids, rows.positions, attn_mask=block).taps
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    for method in ("peagle", "eagle3"):
        drafter = tiny_drafter(target, method, num_hidden_layers=2, seed=1)
        outs = []
        for block_masks in (False, True):
            builder = StepBuilder(method, B, T, CODConfig(3, 0.7, 0.2), 1.0, 0.9, "cpu", block=block_masks)
            t = packed_targets(target, rows.input_ids, rows.positions, builder.target_mask(rows),
                               draft_to_target_ids(drafter), drafter.t2d)
            inp = builder.inputs(rows, t, torch.Generator().manual_seed(4))
            with torch.no_grad():
                outs.append(DraftObjective(drafter, 3)(rows.input_ids, rows.positions, rows.doc, rows.loss_mask,
                                                       t.taps, t.probs, t.argmax, inp.anchor, inp.depth,
                                                       inp.label_row, inp.valid, inp.weight, inp.mask)[0])
        torch.testing.assert_close(outs[0], outs[1], atol=1e-3, rtol=1e-4)


def test_block_masks_list_every_block_a_query_may_see():
    """The GPU's block-sparse masks skip only blocks that hold no visible pair (per TTT step too).

    Eager flex attention on a CPU applies ``mask_mod`` everywhere, so a wrong block list would
    pass the forward test above and silently drop keys on a GPU; this checks the lists themselves.
    """
    lengths = [150, 90, 200, 37]
    rows = pack_examples([Ex(list(range(3, 3 + n)), 5) for n in lengths], 512)
    T = rows.row_len
    dense = ttt_masks(rows.doc, ttt_mod(rows.doc), 3, "cpu", block=False)
    block = ttt_masks(rows.doc, ttt_mod(rows.doc), 3, "cpu", block=True)
    for d, b in zip(dense, block):
        need = d[0, 0].reshape(T // 128, 128, -1, 128).any(3).any(1)  # [q blocks, kv blocks]
        listed = b.to_dense()[0, 0].bool()
        assert listed.shape == need.shape and torch.equal(listed | need, listed)  # nothing needed is skipped
        assert listed.sum() < listed.numel()  # and blocks really are skipped


@pytest.mark.parametrize("method", ["peagle", "eagle3"])
def test_the_top1_term_adds_the_hard_loss_of_the_targets_top_draft_token(method):
    """λ > 0: the objective is soft CE + λ · -log q(argmax p) over the same elements; the stats stay soft."""
    from peagle_lab.train.loss import packed_scores

    target = tiny_target(seed=3)
    drafter = tiny_drafter(target, method, num_hidden_layers=1, seed=5).train()
    rows = pack_examples([Ex(s, 0) for s in SEQS], 32)
    soft_loss, soft_grads, soft_stats, inp = packed_step(target, drafter, rows, method, 3)
    both_loss, both_grads, both_stats, _ = packed_step(target, drafter, rows, method, 3, top1_weight=0.5)
    assert torch.equal(both_stats, soft_stats)  # the logged loss and agreement are the soft ones
    builder = StepBuilder(method, 1, 32, CODConfig(3, 1.0, 1.0), 1.0, 1.0, "cpu", block=False)
    targets = packed_targets(target, rows.input_ids, rows.positions, builder.target_mask(rows),
                             draft_to_target_ids(drafter), drafter.t2d)
    hidden = torch.randn(1, inp.label_row.shape[1], 64)
    ce, _, top1 = packed_scores(drafter, hidden, targets.probs, targets.argmax, inp.label_row, top1=True)
    assert packed_scores(drafter, hidden, targets.probs, targets.argmax, inp.label_row)[2] is None
    logp = torch.log_softmax(drafter.lm_head(drafter.norm(hidden)).float(), -1)[0]
    best = targets.probs[0, inp.label_row[0]].argmax(-1)
    assert torch.allclose(top1[0], -logp[torch.arange(len(best)), best], atol=1e-5)
    assert bool((top1 > 0).all()) and not torch.allclose(top1, ce)
    assert both_loss > soft_loss  # a positive term was added
    twice_loss = packed_step(target, drafter, rows, method, 3, top1_weight=1.0)[0]
    assert torch.allclose(twice_loss - soft_loss, 2 * (both_loss - soft_loss), rtol=1e-4)  # exactly λ · the term
    assert any(not torch.allclose(both_grads[n], g) for n, g in soft_grads.items())


def test_top1_weight_reaches_the_trainers_objective_and_zero_means_off(tmp_path):
    from peagle_lab.train.loop import Trainer, TrainConfig
    from peagle_lab.train.tiny import tiny_examples

    with pytest.raises(ValueError, match="top1_weight=-1.0 is out of range"):
        TrainConfig(top1_weight=-1.0)
    assert TrainConfig(top1_weight=0.0).top1_weight is None  # the same objective as no term: one resume value
    target = tiny_target(seed=0)
    cfg = TrainConfig(method="peagle", steps=1, batch_size=4, row_len=64, k_train=4, compile="off",
                      eval_at_end=False, top1_weight=0.3)
    trainer = Trainer(target, tiny_drafter(target, "peagle", seed=1), tiny_examples(target, 48, seed=0), cfg,
                      tmp_path, progress=False)
    assert trainer.objective.top1_weight == 0.3

"""The exercise checks (peagle_lab.lab.checks) accept the worked solutions and reject wrong answers with a hint."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.lab import checks
from peagle_lab.lab import exercises as ex
from peagle_lab.train import chain_mask


def stub(*args, **kwargs):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize("check", [checks.check_acceptance_length, checks.check_tokens_per_second,
                                   checks.check_fill_by_gather, checks.check_train_head,
                                   checks.check_speedup_at_equal_acceptance])
def test_a_stub_gets_the_not_answered_hint(check):
    with pytest.raises(AssertionError, match="not answered yet: replace the line `raise NotImplementedError"):
        check(stub)


def test_a_non_function_is_refused():
    with pytest.raises(AssertionError, match="expected a function, got int"):
        checks.check_acceptance_length(3)


# ---------------------------------------------------------------- notebook 1
def test_acceptance_length(capsys):
    checks.check_acceptance_length(ex.expected_acceptance_length)
    assert capsys.readouterr().out.startswith("correct: AL(0.8, K=9) = 4.46")


@pytest.mark.parametrize("wrong, hint", [
    (lambda a, k: sum(a ** i for i in range(1, k + 1)), "AL\\(alpha, 0\\) must be 1"),  # forgot the bonus token
    (lambda a, k: (1 - a ** (k + 1)) / (1 - a) if a < 1 else 0.0, "AL = K \\+ 1"),
    (lambda a, k: 1 + k * a, "AL = 1 \\+ alpha \\+ alpha\\^2"),  # independent drafts, no chain
])
def test_acceptance_length_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_acceptance_length(wrong)


def test_tokens_per_second(capsys):
    checks.check_tokens_per_second(ex.predicted_tokens_per_second)
    assert "EAGLE-3 107.6 tok/s, P-EAGLE 161.5 tok/s" in capsys.readouterr().out


def _tps(passes, *, scale=1000.0, prep=True):
    def f(method, *, verify_ms, pass_ms, k, alpha, prep_ms=0.0):
        step = verify_ms + (prep_ms if prep else 0.0) + passes(method, k) * pass_ms
        return scale * ex.expected_acceptance_length(alpha, k) / step
    return f


@pytest.mark.parametrize("wrong, hint", [
    (_tps(lambda m, k: k if m == "eagle3" else 1, scale=1.0), "multiply by 1000"),
    (_tps(lambda m, k: k), "EAGLE-3 pays K drafter passes"),
    (_tps(lambda m, k: k if m == "eagle3" else 1, prep=False), "include prep_ms"),
    (_tps(lambda m, k: k + 1 if m == "eagle3" else 1), "yields AL tokens"),
])
def test_tokens_per_second_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_tokens_per_second(wrong)


# ---------------------------------------------------------------- notebook 2
def test_draft_row(capsys):
    checks.check_draft_row(ex.draft_row_by_hand)
    assert capsys.readouterr().out.startswith("correct: the request's 8 slots (bonus at slot 1, mask positions 22-24")


def _row(**change):
    """``draft_row_by_hand`` with one field's rule replaced: ``change[field](row, token_ids, positions, n, k)``."""
    def draft_row(token_ids, positions, num_accepted, bonus_token, *, k, mask_token_id):
        row = ex.draft_row_by_hand(token_ids, positions, num_accepted, bonus_token, k=k, mask_token_id=mask_token_id)
        return dict(row, **{f: rule(row, token_ids, positions, num_accepted, k) for f, rule in change.items()})
    return draft_row


@pytest.mark.parametrize("wrong, hint", [
    (_row(input_ids=lambda r, t, p, n, k: t[:n] + r["input_ids"][n:]), "slot 0 \\(context\\).*shift by one"),
    (_row(hidden_mapping=lambda r, t, p, n, k: [i - (i == n) if i <= n else -1 for i in range(len(r["positions"]))]),
     "slot 1 \\(bonus\\) has hidden_mapping 0, expected 1"),  # the bonus slot given the previous position's state
    (_row(positions=lambda r, t, p, n, k: [p[min(i, n)] if i < n + k else 0 for i in range(len(r["positions"]))]),
     "slot 2 \\(mask\\) has positions 21, expected 22.*keep counting"),
    (_row(positions=lambda r, t, p, n, k: [p[n] + i - n if i >= n else p[i] for i in range(len(r["positions"]))]),
     "slot 5 \\(padding\\) has positions 25, expected 0.*go to the end of the row"),
    (_row(is_masked=lambda r, t, p, n, k: r["is_masked"] + [False]), "R = T \\+ K - 1 = 8"),
    (lambda *a, **kw: [1, 2, 3], "return a dict with the lists input_ids"),
    (stub, "not answered yet"),
])
def test_draft_row_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_draft_row(wrong)


def test_padding_slots(capsys):
    checks.check_padding_slots(9.0)
    assert capsys.readouterr().out.startswith("correct: 9 of the batch's 32 slots are padding: K - n = 4, 0, 2, 3")


@pytest.mark.parametrize("wrong, hint", [
    (7, "drafts the requests kept"), (5, "the bonus slot does not use up"), (12, "number of mask slots"),
    (23, "number of live slots"), (32, "every slot of the batch"), (10, "10 is off: each request has R"),
    (None, "not answered yet"), ("9", "expected a whole number"), (8.5, "expected a whole number"),
])
def test_padding_slots_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_padding_slots(wrong)


# ---------------------------------------------------------------- notebook 3
def _mask(visible):
    """The exercise's scaffold around a visibility rule ``visible(aq, dq, ak, dk)`` (the part the student writes)."""
    def leaky_mask(anchor_q, depth_q, anchor_k, depth_k, valid_k):
        m = visible(anchor_q[:, :, None], depth_q[:, :, None], anchor_k[:, None, :], depth_k[:, None, :])
        m = m & valid_k[:, None, :]
        return (m | ~m.any(-1, keepdim=True))[:, None]
    return leaky_mask


def test_leaky_mask(capsys):
    checks.check_leaky_mask(ex.leaky_chain_mask, False)
    out = capsys.readouterr().out
    assert out.startswith("correct: your mask leaks as asked; one pass still trains, but with S = 2")
    assert "those drafts do not exist yet" in out


@pytest.mark.parametrize("mask, prediction, hint", [
    (ex.leaky_chain_mask, True, "leaks as asked, but the prediction is off"),
    (chain_mask, False, "that is the correct chain mask, nothing leaks"),
    (_mask(lambda aq, dq, ak, dk: ak <= aq), False, "a deeper draft of its own chain"),  # the own chain leaks too
    (_mask(lambda aq, dq, ak, dk: (dk == 0) | (ak == aq) & (dk <= dq)), False, "a later anchor's element"),
    (_mask(lambda aq, dq, ak, dk: (ak < aq) & (dk > 0) | (ak == aq) & (dk <= dq)), False,
     "which the correct mask shows"),  # the leak, but earlier anchors' context lost
    (_mask(lambda aq, dq, ak, dk: (dk <= 1) & (ak < aq) | (ak == aq) & (dk <= dq)), False,
     "that is the leak asked for"),  # half a leak: earlier chains' depth 1 only
    (lambda aq, dq, ak, dk, valid: ex.leaky_chain_mask(aq, dq, ak, dk, valid)[:, 0], False, "expected a boolean mask"),
    (stub, False, "not answered yet"),
    (ex.leaky_chain_mask, None, "not answered yet"),  # the mask written, the prediction not
    (ex.leaky_chain_mask, "no", "True or False"),
])
def test_leaky_mask_hints(mask, prediction, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_leaky_mask(mask, prediction)



def test_cod_kept(capsys):
    checks.check_cod_kept(ex.cod_kept_elements(1000, 8), 8000)
    assert capsys.readouterr().out.startswith("correct: COD keeps 3374 of 8000 elements (42%)")


@pytest.mark.parametrize("kept, without_cod, hint", [
    (3373, 8000, "round each depth up"), (3373.1, 8000, "round each depth up"),  # no ceil
    (3141.1733, 8000, "without the floor r_min"), (3144, 8000, "without the floor r_min"),
    (3574, 8000, "one depth too many"), (2574, 8000, "depth 0 keeps every anchor"),
    (8000, 8000, "that is every element, without COD"), (3000, 8000, "3000 is off"),
    (3374, 9000, "n x K_train = 1000 x 8"), (None, 8000, "not answered yet"), (3374, None, "not answered yet"),
    ("3374", 8000, "should be a number"),
])
def test_cod_kept_hints(kept, without_cod, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_cod_kept(kept, without_cod)


# ---------------------------------------------------------------- notebook 4
def test_fill_by_gather(capsys):
    checks.check_fill_by_gather(ex.fill_draft_hidden_by_gather)
    assert capsys.readouterr().out.startswith("correct: bit-identical")


def test_fill_by_gather_names_the_wrong_rows():
    def zeros_for_masks(hidden, mapping, masked, shared):  # mask slots left at zero
        table = torch.cat([hidden, hidden.new_zeros(1, hidden.shape[1])])
        return table.index_select(0, torch.where(mapping >= 0, mapping, hidden.shape[0]))

    with pytest.raises(AssertionError, match="first among the mask slots"):
        checks.check_fill_by_gather(zeros_for_masks)


def test_fill_by_gather_refuses_a_where_over_the_output():
    from peagle_lab.kernels.fill_draft_hidden import fill_draft_hidden_ref

    with pytest.raises(AssertionError, match="right values, but torch.where produced a"):
        checks.check_fill_by_gather(fill_draft_hidden_ref)


def test_fill_by_gather_wants_the_input_dtype():
    with pytest.raises(AssertionError, match="expected a tensor"):
        checks.check_fill_by_gather(lambda h, m, k, s: ex.fill_draft_hidden_by_gather(h, m, k, s).double())


@pytest.mark.parametrize("moved, hint", [(2 * 64 * 14 * 576 * 2, "too much"), (64 * 14 * 576, "too little"),
                                         (64 * 14 * 576 * 2, "close but short")])
def test_moved_bytes_hints(moved, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_moved_bytes(moved)


def test_moved_bytes_accepts_the_hidden_rows_alone(capsys):
    checks.check_moved_bytes(2 * 576 * (64 * 14 + 64 * 4 + 1))  # what dominates: within 15 % of the full count
    assert capsys.readouterr().out.startswith("correct:")
    with pytest.raises(AssertionError, match="expected a number"):
        checks.check_moved_bytes("1.4 MB")
    with pytest.raises(AssertionError, match="not answered yet"):
        checks.check_moved_bytes(None)  # the exercise cell stopped at its stub before setting it


# ---------------------------------------------------------------- notebook 6
def _train_head(fixed_method=None):
    import tempfile

    from peagle_lab.train import TrainConfig, Trainer, new_drafter

    def train_head(setup, method, steps=300):
        head = new_drafter(setup.target, fixed_method or method, 1, setup.vocab, seed=0)
        cfg = TrainConfig(method=fixed_method or method, steps=steps, lr=3e-3, warmup_fraction=0.03, batch_size=8,
                          row_len=64, k_train=4, ckpt_every=0, eval_at_end=False)
        with tempfile.TemporaryDirectory() as run_dir:
            return head, Trainer(setup.target, head, setup.train, cfg, run_dir, progress=False).run()
    return train_head


def test_train_head(capsys):
    checks.check_train_head(_train_head(), steps=12)
    assert capsys.readouterr().out.startswith("correct: both methods train")


def test_train_head_must_pass_the_method_on():
    with pytest.raises(AssertionError, match="returned a head for 'eagle3'"):
        checks.check_train_head(_train_head("eagle3"), steps=12)


# ---------------------------------------------------------------- notebook 5
def test_speedup_at_equal_acceptance(capsys):
    checks.check_speedup_at_equal_acceptance(ex.speedup_at_equal_acceptance)
    assert capsys.readouterr().out.startswith("correct: verify 1.2 ms")


def _mean_verify(p, e):
    return (p.verify_ms + e.verify_ms) / 2


@pytest.mark.parametrize("wrong, hint", [
    (lambda p, e: 1 / ex.speedup_at_equal_acceptance(p, e), "is EAGLE-3 over P-EAGLE"),
    (lambda p, e: (e.verify_ms + e.prep_ms + e.draft_ms) / (p.verify_ms + p.prep_ms + p.draft_ms), "use their mean"),
    (lambda p, e: (_mean_verify(p, e) + e.draft_ms) / (_mean_verify(p, e) + p.draft_ms), "prep_ms"),
    (lambda p, e: e.draft_ms / p.draft_ms, "A step costs verify \\(the mean of the two\\)"),
    (lambda p, e: "1.28", "return one number"),
])
def test_speedup_at_equal_acceptance_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_speedup_at_equal_acceptance(wrong)

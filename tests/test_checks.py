"""The exercise checks (peagle_lab.lab.checks) accept the worked solutions and reject wrong answers with a hint."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from peagle_lab.lab import checks
from peagle_lab.lab import exercises as ex


def stub(*args, **kwargs):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize("check", [checks.check_verify_by_hand, checks.check_drafter_work,
                                   checks.check_fill_by_gather, checks.check_speedup_at_equal_acceptance])
def test_a_stub_gets_the_not_answered_line_and_the_notebook_goes_on(check, capsys):
    check(stub)  # no exception: "Run All" goes on
    assert capsys.readouterr().out.startswith('not answered yet: write your answer in the exercise cell above')


@pytest.mark.parametrize("check, answers", [(checks.check_draft_row, (stub,)), (checks.check_padding_slots, (None,)),
                                            (checks.check_cod_kept, (None, 8000)), (checks.check_cod_kept, (3374, None))])
def test_an_unset_answer_gets_the_not_answered_line(check, answers, capsys):
    check(*answers)
    assert capsys.readouterr().out.startswith("not answered yet")


def test_a_non_function_is_refused():
    with pytest.raises(AssertionError, match="expected a function, got int"):
        checks.check_verify_by_hand(3)


# ---------------------------------------------------------------- notebook 1
def test_verify_by_hand(capsys):
    checks.check_verify_by_hand(ex.verify_by_hand)
    assert capsys.readouterr().out.startswith("correct: drafts [5, 9, 7] against the target's [5, 6, 7, 8] gain [5, 6]")


def _verify(stop=True, extra=True, keep_rejected=False, shift=0):
    """A hand verifier with one mistake: no stop at the first mismatch, no recovered/bonus token, ..."""
    def verify(drafts, choices):
        out = []
        for i, d in enumerate(drafts):
            c = choices[min(i + shift, len(drafts))]
            if d != c:
                if keep_rejected:
                    out.append(d)
                if stop:
                    return out + ([c] if extra and not keep_rejected else [])
                continue
            out.append(d)
        return out + ([choices[len(drafts)]] if extra else [])
    return verify


@pytest.mark.parametrize("wrong, hint", [
    (_verify(extra=False), "Every step also gains the target's own token"),  # no recovered or bonus token
    (_verify(keep_rejected=True), r"Draft 2 \(9\) is rejected: the target chose 6 there"),
    (_verify(stop=False), "Verification stops at the first mismatch"),  # counts draft 3 after draft 2 failed
    (_verify(shift=1), "target_choices\\[0\\] checks drafts\\[0\\]"),  # draft i checked against the choice after it
    (lambda drafts, choices: len(drafts), "return the list of tokens"),
])
def test_verify_by_hand_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_verify_by_hand(wrong)


def test_drafter_work(capsys):
    checks.check_drafter_work(ex.drafter_work)
    assert "EAGLE-3 (1 layer) runs 5 passes and 10 slot-layers, P-EAGLE (4 layers) 1 pass and 40" in capsys.readouterr().out


def _work(passes, slots, use_layers=True):
    return lambda method, *, k, layers: (passes(method, k), slots(method, k) * (layers if use_layers else 1))


@pytest.mark.parametrize("wrong, hint", [
    (_work(lambda m, k: k if m == "eagle3" else 1, lambda m, k: k), "EAGLE-3's first pass carries the whole verified row"),
    (_work(lambda m, k: k if m == "eagle3" else 1, lambda m, k: 2 * k if m == "eagle3" else k),
     "P-EAGLE's pass carries every slot of the request's row"),  # only the K sampled slots
    (_work(lambda m, k: k if m == "eagle3" else 1, lambda m, k: 2 * k, use_layers=False), "through every layer"),
    (_work(lambda m, k: k + 1 if m == "eagle3" else 1, lambda m, k: 2 * k), "EAGLE-3 drafts one token per pass"),
    (_work(lambda m, k: k, lambda m, k: 2 * k), "P-EAGLE drafts all K tokens in one pass"),
    (_work(lambda m, k: k if m == "eagle3" else 1, lambda m, k: (k + 1) * k if m == "eagle3" else 2 * k),
     "count the slots of every pass"),  # each EAGLE-3 pass re-reads the whole row
    (lambda method, *, k, layers: 7, "return two numbers"),
])
def test_drafter_work_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_drafter_work(wrong)


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
    ("9", "expected a whole number"), (8.5, "expected a whole number"),
])
def test_padding_slots_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_padding_slots(wrong)


# ---------------------------------------------------------------- notebook 3
def test_chain_mask(capsys):
    checks.check_chain_mask(ex.chain_sees, 4)
    out = capsys.readouterr().out
    assert out.startswith("correct: your rule is the chain mask on 3 COD layouts")
    assert "Key (3, 0) embeds x[4], the token chain 1 drafts at depth 1" in out


@pytest.mark.parametrize("as_bool", [np.bool_, torch.tensor])
def test_chain_mask_takes_numpy_and_tensor_truth_values(as_bool, capsys):
    checks.check_chain_mask(lambda *pair: as_bool(ex.chain_sees(*pair)), 4)
    assert capsys.readouterr().out.startswith("correct:")


@pytest.mark.parametrize("sees, leaked, hint", [
    (lambda a, d, ak, dk: ak + dk <= a + d, 4, r"query \(1, 2\) sees key \(3, 0\).*positions alone do not decide"),
    (lambda a, d, ak, dk: ak < a or (ak == a and dk <= d), 4,  # any depth of an earlier chain: the leaky mask
     r"query \(3, 1\) sees key \(1, 1\).*never another chain's drafts"),
    (lambda a, d, ak, dk: (dk == 0 and ak <= a) or (ak, dk) == (a, d), 4,  # the own chain forgotten
     r"query \(1, 2\) does not see key \(1, 1\).*an earlier slot of its own chain"),
    (lambda a, d, ak, dk: (dk == 0 and ak <= a) or (ak == a and dk < d), 4, "always sees its own key"),
    (lambda a, d, ak, dk: (dk == 0 and ak <= a) or ak == a, 4, "a later slot of the pass: the future"),
    (lambda a, d, ak, dk: dk == 0 or (ak == a and dk <= d), 4, "a later anchor's context is the future"),
    (lambda a, d, ak, dk: "yes", 4, "return True or False"),
    (ex.chain_sees, 5, "x\\[5\\] is what query \\(1, 2\\) must predict"),
    (ex.chain_sees, 3, "EAGLE's shift by one"),
    (ex.chain_sees, 2, "x\\[2\\] is off"),
    (ex.chain_sees, "x4", "a whole number"),
])
def test_chain_mask_hints(sees, leaked, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_chain_mask(sees, leaked)


@pytest.mark.parametrize("check, answers, worked", [
    (checks.check_verify_by_hand, (stub,), ex.verify_by_hand),
    (checks.check_drafter_work, (stub,), ex.drafter_work),
    (checks.check_chain_mask, (stub, 4), (ex.chain_sees, 4)),
    (checks.check_chain_mask, (ex.chain_sees, None), (ex.chain_sees, 4)),  # the rule written, the token not
])
def test_unanswered_notebook_1_and_3_exercises_print_and_hand_on_the_worked_answer(check, answers, worked, capsys):
    assert check(*answers) == worked
    assert capsys.readouterr().out.startswith("not answered yet:")


def test_cod_kept(capsys):
    checks.check_cod_kept(ex.cod_kept_elements(1000, 8), 8000)
    assert capsys.readouterr().out.startswith("correct: COD keeps 3374 of 8000 elements (42%)")


@pytest.mark.parametrize("kept, without_cod, hint", [
    (3373, 8000, "round each depth up"), (3373.1, 8000, "round each depth up"),  # no ceil
    (3141.1733, 8000, "without the floor r_min"), (3144, 8000, "without the floor r_min"),
    (3574, 8000, "one depth too many"), (2574, 8000, "depth 0 keeps every anchor"),
    (8000, 8000, "that is every element, without COD"), (3000, 8000, "3000 is off"),
    (3374, 9000, "n x K_train = 1000 x 8"),
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
    capsys.readouterr()
    checks.check_moved_bytes(None)  # unanswered: a line that says so, and "Run All" goes on
    assert capsys.readouterr().out.startswith("not answered yet")


# ---------------------------------------------------------------- notebook 6
def test_weakest_depth(capsys):
    checks.check_weakest_depth(*ex.weakest_depth(ex.shipped_depth_agreement()))
    assert capsys.readouterr().out.startswith("correct: P-EAGLE's agreement falls from")


@pytest.mark.parametrize("answer, hint", [
    (("eagle3", 6, "a"), "feeds each draft back: its depth d sees the d tokens drafted before it"),
    (("peagle", 0, "a"), "depth 0 is the one slot fed the target's own hidden state"),
    (("peagle", 3, "a"), "depth 3 agrees 0.6\\d, not the least"),
    (("peagle", 7, "b"), "fewer examples slow learning, they do not cap it"),
    (("peagle", 7, "c"), "distance alone does not explain it"),
    (("peagle", 7.0, "a"), "a whole number"),
])
def test_weakest_depth_hints(answer, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_weakest_depth(*answer)


# ---------------------------------------------------------------- notebook 5
def test_speedup_at_equal_acceptance_is_checked_on_every_cell_of_the_answer_length_sweep(capsys):
    from peagle_lab.lab import predict

    doc, _ = predict.answer_sweep()  # the newest: a newer sweep is checked without editing this test
    cells = [{(r["workload"], r["concurrency"], r["k"]) for r in doc["rows"] if r["method"] == m and r.get("verify_ms")}
             for m in ("peagle", "eagle3")]
    checks.check_speedup_at_equal_acceptance(ex.speedup_at_equal_acceptance)
    out = capsys.readouterr().out
    assert len(cells[0] & cells[1]) >= 16  # both workloads, c = 1 and 64, several K each
    assert f"right on all {len(cells[0] & cells[1])} cells of the answer-length sweep" in out
    assert "at c = 1, K = 7 on code" in out


def _step(r, verify):
    return verify + r.prep_ms + r.draft_ms


@pytest.mark.parametrize("convention", [
    lambda p, e: _step(e, e.verify_ms) / _step(p, p.verify_ms),  # each row's own verify time
    lambda p, e: _step(e, p.verify_ms) / _step(p, p.verify_ms),  # P-EAGLE's for both
    ex.speedup_at_equal_acceptance,  # the mean of the two
])
def test_speedup_at_equal_acceptance_takes_any_sound_verify_convention(convention, capsys):
    checks.check_speedup_at_equal_acceptance(convention)
    assert capsys.readouterr().out.startswith("correct:")


@pytest.mark.parametrize("wrong, hint", [
    (lambda p, e: 1 / ex.speedup_at_equal_acceptance(p, e), "that is EAGLE-3 over P-EAGLE"),
    (lambda p, e: e.draft_ms / p.draft_ms, "compares the drafting alone"),
    (lambda p, e: (p.acceptance_length / p.step_ms) / (e.acceptance_length / e.step_ms), "acceptance included"),
    (lambda p, e: _step(e, 0.0) / _step(p, 0.0) * 0.9, "a step costs the verify pass"),
    (lambda p, e: "1.28", "return one number"),
])
def test_speedup_at_equal_acceptance_hints(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_speedup_at_equal_acceptance(wrong)

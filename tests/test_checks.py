"""The exercise checks (peagle_lab.lab.checks) accept the worked solutions and reject wrong answers with a hint."""
from __future__ import annotations

import pytest
import torch

from peagle_lab.lab import checks
from peagle_lab.lab import exercises as ex


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

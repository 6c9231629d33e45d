"""Tests of peagle_lab.verify: greedy tables, rejection tables, distribution, errors."""
from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from peagle_lab.verify import (
    VerifyResult,
    sample_verify_noise,
    target_probs_from_logits,
    verify_greedy,
    verify_rejection,
)

V = 10  # vocabulary of the table tests


def logits_for(target_argmax: list[list[int]], vocab: int = V) -> torch.Tensor:
    """``# [c, K+1, V]`` logits whose argmax per slot is ``target_argmax``."""
    return 5.0 * torch.nn.functional.one_hot(torch.tensor(target_argmax), vocab).float()


def assert_consistent(r: VerifyResult, draft_tokens: torch.Tensor) -> None:
    """Every field of a result must tell the same story as ``output_tokens``."""
    c, k = draft_tokens.shape
    for b in range(c):
        n = int(r.num_accepted[b])
        assert 0 <= n <= k
        assert r.output_tokens[b, :n].tolist() == draft_tokens[b, :n].tolist()
        assert int(r.output_tokens[b, n]) == int(r.next_tokens[b])
        assert (r.output_tokens[b, n + 1:] == -1).all()
        assert bool(r.is_bonus[b]) == (n == k)
    positions = torch.arange(k)
    assert torch.equal(r.accepted_per_position,
                       (positions < r.num_accepted[:, None]).sum(dim=0))


# ---------------------------------------------------------------------------- greedy

GREEDY_CASES = [
    # (target argmax per slot [c, K+1], drafts [c, K], expected output_tokens [c, K+1])
    pytest.param([[1, 2, 3, 4]], [[1, 2, 3]], [[1, 2, 3, 4]],
                 id="all accepted, bonus 4"),
    pytest.param([[1, 2, 3, 4]], [[5, 2, 3]], [[1, -1, -1, -1]],
                 id="mismatch at position 0, recovered 1"),
    pytest.param([[1, 2, 3, 4]], [[1, 5, 3]], [[1, 2, -1, -1]],
                 id="mismatch at position 1, the later match does not count"),
    pytest.param([[1, 2, 3, 4]], [[1, 2, 5]], [[1, 2, 3, -1]],
                 id="mismatch at position 2"),
    pytest.param([[7, 8]], [[7]], [[7, 8]], id="K=1 accepted"),
    pytest.param([[7, 8]], [[6]], [[7, -1]], id="K=1 rejected"),
    pytest.param(
        [[1, 2, 3, 4],
         [5, 6, 7, 8],
         [9, 0, 1, 2],
         [3, 3, 3, 3]],
        [[1, 2, 3],      # all accepted
         [0, 6, 7],      # mismatch at position 0
         [9, 0, 2],      # mismatch at position 2
         [3, 4, 3]],     # mismatch at position 1
        [[1, 2, 3, 4],
         [5, -1, -1, -1],
         [9, 0, 1, -1],
         [3, 3, -1, -1]],
        id="several requests, different outcomes"),
]


@pytest.mark.parametrize("target_argmax, drafts, expected", GREEDY_CASES)
def test_greedy_table(target_argmax, drafts, expected):
    draft_tokens = torch.tensor(drafts)
    r = verify_greedy(logits_for(target_argmax), draft_tokens)
    expected = torch.tensor(expected)
    assert torch.equal(r.output_tokens, expected)
    n = (expected != -1).sum(dim=1) - 1
    assert torch.equal(r.num_accepted, n)
    assert torch.equal(r.next_tokens, expected.gather(1, n[:, None]).squeeze(1))
    assert torch.equal(r.is_bonus, n == draft_tokens.shape[1])
    assert r.output_tokens.dtype == r.num_accepted.dtype == torch.int64
    assert_consistent(r, draft_tokens)


def test_greedy_per_position_counts():
    # accepted counts 0, 1, 3, 3 with K=3: position 0 passes in 3 requests, 1 and 2 in 2
    r = verify_greedy(
        logits_for([[1, 2, 3, 4]] * 4),
        torch.tensor([[0, 2, 3], [1, 0, 3], [1, 2, 3], [1, 2, 3]]))
    assert torch.equal(r.num_accepted, torch.tensor([0, 1, 3, 3]))
    assert torch.equal(r.accepted_per_position, torch.tensor([3, 2, 2]))
    assert (r.num_drafts, r.num_draft_tokens, r.num_accepted_tokens) == (4, 12, 7)


def test_greedy_ties_go_to_lowest_id():
    # slot 0 has a tie between ids 2 and 5: the target's choice is 2, so drafting 5 fails
    logits = torch.zeros(2, 2, V)
    logits[:, 0, 2] = logits[:, 0, 5] = 1.0
    r = verify_greedy(logits, torch.tensor([[5], [2]]))
    assert torch.equal(r.output_tokens, torch.tensor([[2, -1], [2, 0]]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_greedy_any_float_dtype(dtype):
    logits = torch.randint(-4, 4, (6, 4, 33)).to(dtype)  # small ints: exact in every dtype
    drafts = torch.randint(0, 33, (6, 3))
    a = verify_greedy(logits, drafts)
    b = verify_greedy(logits.float(), drafts)
    assert torch.equal(a.output_tokens, b.output_tokens)


@given(c=st.integers(1, 8), k=st.integers(1, 6), vocab=st.integers(2, 20),
       seed=st.integers(0, 2**31 - 1))
def test_greedy_equals_plain_greedy_decoding(c, k, vocab, seed):
    # Lossless: accepted drafts plus the next token are exactly the target's argmax path.
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(-2, 3, (c, k + 1, vocab), generator=g).float()  # many ties
    target_argmax = logits.argmax(dim=-1)
    prefix = torch.randint(0, k + 1, (c,), generator=g)
    noise = torch.randint(0, vocab, (c, k), generator=g)
    drafts = torch.where(torch.arange(k) < prefix[:, None], target_argmax[:, :k], noise)
    r = verify_greedy(logits, drafts)
    assert_consistent(r, drafts)
    for b in range(c):
        n = int(r.num_accepted[b])
        assert r.output_tokens[b, :n + 1].tolist() == target_argmax[b, :n + 1].tolist()
        assert n == k or int(drafts[b, n]) != int(target_argmax[b, n])


# ------------------------------------------------------------------------- rejection

def one_hot_probs(tokens: list[list[int]]) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(tokens), V).float()


def test_rejection_equal_distributions_accept_all_and_sample_bonus():
    # target == draft: the ratio is 1 and every uniform in [0, 1) is below it
    target = torch.softmax(torch.randn(3, 4, V), dim=-1)
    target[:, 3] = one_hot_probs([[6], [6], [6]])[:, 0]  # the bonus slot can only give 6
    drafts = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    uniform = torch.tensor([[0.0, 0.5, 0.999]] * 3)
    r = verify_rejection(target, target[:, :3].clone(), drafts, uniform, torch.ones(3, V))
    assert torch.equal(r.output_tokens, torch.tensor(
        [[1, 2, 3, 6], [4, 5, 6, 6], [7, 8, 9, 6]]))
    assert r.is_bonus.all()


RATIO_CASES = [
    # target 0.3 / draft 0.6 on the drafted token: accepted iff uniform < 0.5
    pytest.param(0.49, 1, id="uniform below the ratio: accepted"),
    pytest.param(0.5, 0, id="uniform equal to the ratio: rejected (strict <)"),
    pytest.param(0.51, 0, id="uniform above the ratio: rejected"),
]


@pytest.mark.parametrize("u, accepted", RATIO_CASES)
def test_rejection_accept_threshold(u, accepted):
    target = torch.tensor([[[0.3, 0.7] + [0.0] * (V - 2), [0.0] * (V - 1) + [1.0]]])
    draft = torch.tensor([[[0.6, 0.4] + [0.0] * (V - 2)]])
    r = verify_rejection(target, draft, torch.tensor([[0]]), torch.tensor([[u]]),
                         torch.ones(1, V))
    # rejected: the residual max(0, target - draft) = [0, 0.3, 0, ...] can only give 1
    expected = [[0, V - 1]] if accepted else [[1, -1]]
    assert torch.equal(r.output_tokens, torch.tensor(expected))


def test_rejection_table_several_requests():
    # K=3. Drafts are one-hot: the draft distribution at each slot is its own token.
    #   request 0: target agrees everywhere                 -> all accepted, bonus 9
    #   request 1: target gives 0 to the draft at position 0 -> mismatch at position 0
    #   request 2: target gives 0 to the draft at position 2 -> mismatch at position 2
    drafts = [[1, 2, 3], [1, 2, 3], [1, 2, 3]]
    target = one_hot_probs([[1, 2, 3, 9], [5, 2, 3, 9], [1, 2, 4, 9]])
    r = verify_rejection(target, one_hot_probs(drafts), torch.tensor(drafts),
                         torch.full((3, 3), 0.5), torch.ones(3, V))
    assert torch.equal(r.output_tokens, torch.tensor(
        [[1, 2, 3, 9], [5, -1, -1, -1], [1, 2, 4, -1]]))
    assert torch.equal(r.num_accepted, torch.tensor([3, 0, 2]))
    assert torch.equal(r.accepted_per_position, torch.tensor([2, 2, 1]))
    assert_consistent(r, torch.tensor(drafts))


def test_rejection_noise_picks_among_positive_weights():
    # residual = [0, 0.5, 0.1, 0, ...]: the smallest noise among positive weights wins,
    # a tiny noise on a zero-weight token cannot
    target = torch.tensor([[[0.2, 0.6, 0.2] + [0.0] * (V - 3), [1.0] + [0.0] * (V - 1)]])
    draft = torch.tensor([[[0.8, 0.1, 0.1] + [0.0] * (V - 3)]])
    for noise_2, expected in ((1.0, 1), (0.1, 2)):
        noise = torch.ones(1, V)
        noise[0, 2] = noise_2
        noise[0, 7] = 1e-30
        r = verify_rejection(target, draft, torch.tensor([[0]]), torch.tensor([[0.9]]), noise)
        assert int(r.next_tokens[0]) == expected


def test_rejection_falls_back_to_target_when_residual_is_zero():
    # an unnormalised target (mass 0.5) under draft = 2 * target: the residual is all zero
    target = torch.softmax(torch.randn(1, 2, V), dim=-1)
    target[0, 0] = one_hot_probs([[4]])[0, 0] * 0.5
    draft = 2 * target[:, :1]
    r = verify_rejection(target, draft, torch.tensor([[4]]), torch.tensor([[0.6]]),
                         torch.ones(1, V))
    assert torch.equal(r.output_tokens, torch.tensor([[4, -1]]))  # from target: only 4


@given(c=st.integers(1, 8), k=st.integers(1, 6), vocab=st.integers(2, 20),
       seed=st.integers(0, 2**31 - 1))
def test_rejection_result_is_consistent(c, k, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    target = torch.softmax(torch.randn(c, k + 1, vocab, generator=g), dim=-1)
    draft = torch.softmax(torch.randn(c, k, vocab, generator=g), dim=-1)
    drafts = torch.multinomial(draft.reshape(-1, vocab), 1, generator=g).reshape(c, k)
    uniform, noise = sample_verify_noise(c, k, vocab, g)
    r = verify_rejection(target, draft, drafts, uniform, noise)
    assert_consistent(r, drafts)
    # a recovered token never has negative residual weight: target > draft there
    for b in range(c):
        n, tok = int(r.num_accepted[b]), int(r.next_tokens[b])
        if n < k:
            assert target[b, n, tok] > draft[b, n, tok]


# ------------------------------------------------- distribution (the lossless claim)

TARGET = torch.tensor([0.25, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.04, 0.03, 0.03])
TARGET_BONUS = TARGET.flip(0)  # a second, different distribution for the bonus slot
DRAFT_CLOSE = 0.9 * TARGET + 0.01
DRAFT_FAR = torch.tensor([0.01, 0.01, 0.02, 0.03, 0.04, 0.05, 0.08, 0.16, 0.25, 0.35])
# Chi-square critical value at p = 0.001 with 9 degrees of freedom (10 categories, no
# fitted parameters): a correct sampler fails this seeded test with probability 0.001.
CHI2_CRIT_DF9_P001 = 27.877


def chi_square(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic of observed token counts against ``len(tokens) * probs``."""
    observed = torch.bincount(tokens, minlength=len(probs)).double()
    expected = len(tokens) * probs.double()
    return float(((observed - expected) ** 2 / expected).sum())


def run_k1_batch(draft_dist: torch.Tensor, c: int = 20000, seed: int = 1234):
    """One K=1 verify step for c independent requests sharing one target and draft."""
    g = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(draft_dist, c, replacement=True, generator=g)[:, None]
    target = torch.stack([TARGET, TARGET_BONUS]).expand(c, 2, V)
    uniform, noise = sample_verify_noise(c, 1, V, g)
    r = verify_rejection(target, draft_dist.expand(c, 1, V), drafts, uniform, noise)
    return r, drafts


@pytest.mark.parametrize("draft_dist", [DRAFT_CLOSE, DRAFT_FAR], ids=["close", "far"])
def test_rejection_reproduces_target_distribution(draft_dist):
    r, drafts = run_k1_batch(draft_dist)
    first = r.output_tokens[:, 0]  # the accepted draft or the recovered token
    assert chi_square(first, TARGET) < CHI2_CRIT_DF9_P001
    # the bonus token, drawn only when the draft was accepted, follows slot 1's target
    assert chi_square(r.next_tokens[r.is_bonus], TARGET_BONUS) < CHI2_CRIT_DF9_P001
    # acceptance probability is sum(min(target, draft)); 4 sigma of a binomial
    p = float(torch.minimum(TARGET, draft_dist).sum())
    assert abs(float(r.is_bonus.double().mean()) - p) < 4 * (p * (1 - p) / len(first)) ** 0.5


def test_chi_square_has_power():
    # the same statistic rejects the far draft's own tokens: the test above can fail
    _, drafts = run_k1_batch(DRAFT_FAR)
    assert chi_square(drafts[:, 0], TARGET) > 100 * CHI2_CRIT_DF9_P001


def test_rejection_deterministic_under_seed():
    a, _ = run_k1_batch(DRAFT_FAR, c=1000, seed=7)
    b, _ = run_k1_batch(DRAFT_FAR, c=1000, seed=7)
    other, _ = run_k1_batch(DRAFT_FAR, c=1000, seed=8)
    assert torch.equal(a.output_tokens, b.output_tokens)
    assert not torch.equal(a.output_tokens, other.output_tokens)


# ----------------------------------------------------------------- helpers and errors

def test_sample_verify_noise():
    g = torch.Generator().manual_seed(0)
    uniform, noise = sample_verify_noise(4, 3, 50, g)
    assert uniform.shape == (4, 3) and noise.shape == (4, 50)
    assert uniform.dtype == noise.dtype == torch.float32
    assert ((uniform >= 0) & (uniform < 1)).all() and (noise > 0).all()
    again = sample_verify_noise(4, 3, 50, torch.Generator().manual_seed(0))
    assert torch.equal(uniform, again[0]) and torch.equal(noise, again[1])
    with pytest.raises(ValueError, match=re.escape("V=0: expected an integer >= 1")):
        sample_verify_noise(4, 3, 0, g)


def test_target_probs_from_logits():
    logits = torch.randn(2, 3, V, dtype=torch.bfloat16)
    probs = target_probs_from_logits(logits, temperature=0.7)
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3))  # default float32 tol
    torch.testing.assert_close(probs, torch.softmax(logits.float() / 0.7, dim=-1))
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="temperature=.*expected a finite value > 0"):
            target_probs_from_logits(logits, bad)


def test_result_is_frozen():
    r = verify_greedy(logits_for([[1, 2]]), torch.tensor([[1]]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.num_accepted = torch.tensor([0])


GREEDY_ERRORS = [
    (torch.zeros(2, 5), torch.zeros(2, 4, dtype=torch.int64),
     "target_logits has shape (2, 5): expected 3 dims [c, K+1, V]"),
    (torch.zeros(2, 5, V), torch.zeros(2, 3, dtype=torch.int64),
     "draft_tokens has shape (2, 3) but target_logits implies c=2, K=4: expected (2, 4)"),
    (torch.zeros(2, 5, V), torch.zeros(3, 4, dtype=torch.int64),
     "draft_tokens has shape (3, 4) but target_logits implies c=2, K=4: expected (2, 4)"),
    (torch.zeros(2, 5, V), torch.zeros(2, 4),
     "draft_tokens has dtype torch.float32: expected torch.int64"),
    (torch.zeros(2, 5, V, dtype=torch.int64), torch.zeros(2, 4, dtype=torch.int64),
     "target_logits has dtype torch.int64: expected a floating dtype"),
    (torch.zeros(2, 1, V), torch.zeros(2, 0, dtype=torch.int64),
     "target_logits has shape (2, 1, 10): expected c >= 1, K+1 >= 2"),
    (torch.zeros(2, 5, V), torch.zeros(2, 4, dtype=torch.int64, device="meta"),
     "draft_tokens is on meta but target_logits is on cpu: expected one device"),
]


@pytest.mark.parametrize("logits, drafts, message", GREEDY_ERRORS)
def test_greedy_bad_inputs(logits, drafts, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        verify_greedy(logits, drafts)


def _rejection_args(c=2, k=3, vocab=V):
    return dict(target_probs=torch.full((c, k + 1, vocab), 0.1),
                draft_probs=torch.full((c, k, vocab), 0.1),
                draft_tokens=torch.zeros(c, k, dtype=torch.int64),
                uniform=torch.zeros(c, k), noise=torch.ones(c, vocab))


REJECTION_ERRORS = [
    ("draft_probs", torch.zeros(2, 4, V),
     "draft_probs has shape (2, 4, 10) but target_probs implies c=2, K=3, V=10: "
     "expected (2, 3, 10)"),
    ("uniform", torch.zeros(3),
     "uniform has shape (3,) but target_probs implies c=2, K=3, V=10: expected (2, 3)"),
    ("noise", torch.ones(2, V + 1),
     "noise has shape (2, 11) but target_probs implies c=2, K=3, V=10: expected (2, 10)"),
    ("uniform", torch.zeros(2, 3, dtype=torch.int64),
     "uniform has dtype torch.int64: expected a floating dtype"),
    ("draft_tokens", torch.zeros(2, 4, dtype=torch.int64),
     "draft_tokens has shape (2, 4) but target_probs implies c=2, K=3: expected (2, 3)"),
    ("noise", torch.ones(2, V, device="meta"), "noise is on meta but target_probs is on cpu: expected one device"),
]


@pytest.mark.parametrize("name, value, message", REJECTION_ERRORS)
def test_rejection_bad_inputs(name, value, message):
    args = _rejection_args()
    args[name] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        verify_rejection(**args)

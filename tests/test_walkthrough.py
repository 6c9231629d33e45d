"""One decode step taken apart (peagle_lab.lab.walkthrough), on the tiny seeded models."""
from __future__ import annotations

import pytest
import torch

from peagle_lab import SpecConfig, SpecDecoder
from peagle_lab.engine import StepTrace
from peagle_lab.testing import tiny_drafter, tiny_target
from peagle_lab.lab.walkthrough import median_step, one_step, oracle_drafts, prefill

PROMPTS = [[5, 17, 33, 8, 61], [40, 3, 9]]


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def greedy(target, n):
    return SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=n)).generate(
        PROMPTS, eos_token_ids=()).tokens


def test_prefill_shapes_and_new_token(target):
    pre = prefill(target, PROMPTS)
    assert pre.lengths == (5, 3) and pre.token_ids.shape == (2, 5)
    assert pre.taps.shape == (2, 5, 3 * target.config.hidden_size)
    assert pre.new_tokens.tolist() == [t[0] for t in greedy(target, 1)]


@pytest.mark.parametrize("method, forwards", [("eagle3", 4), ("peagle", 1)])
def test_one_step_drafts_and_verifies(target, method, forwards):
    pre = prefill(target, PROMPTS)
    step = one_step(target, tiny_drafter(target, method), pre, k=4)
    assert step.draft.num_forwards == forwards and step.trace.drafter_forwards == forwards
    assert step.drafts.shape == (2, 4) and torch.equal(step.drafts, step.draft.tokens)
    assert step.trace.verify_ms > 0 and step.trace.draft_ms > 0
    # Lossless: accepted drafts and the next token are plain greedy's tokens 1..n+1.
    truth = greedy(target, 6)
    for b in range(2):
        n = int(step.verify.num_accepted[b])
        assert step.verify.output_tokens[b, : n + 1].tolist() == truth[b][1: n + 2]


def test_oracle_drafts_are_accepted_up_to_the_wrong_position(target):
    pre = prefill(target, PROMPTS)
    drafts = oracle_drafts(target, pre, 4, [1, None])
    step = one_step(target, tiny_drafter(target, "peagle"), pre, k=4, drafts=drafts)
    assert step.verify.num_accepted.tolist() == [1, 4]
    assert step.verify.is_bonus.tolist() == [False, True]
    assert torch.equal(step.target_choice[1, :4], drafts[1])


def test_bad_arguments(target):
    pre = prefill(target, PROMPTS)
    with pytest.raises(ValueError):
        oracle_drafts(target, pre, 4, [None])
    with pytest.raises(ValueError):
        oracle_drafts(target, pre, 4, [4, None])
    with pytest.raises(ValueError):
        one_step(target, tiny_drafter(target, "peagle"), pre, k=4, drafts=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError):
        prefill(target, [[1], []])


def test_median_step_skips_warm_up_and_idle_drafting():
    trace = [StepTrace(0, 100.0, 9.0, 9.0, (0, 0), 3), StepTrace(1, 10.0, 1.0, 3.0, (1, 2), 3),
             StepTrace(2, 12.0, 2.0, 5.0, (3, 2), 3), StepTrace(3, 11.0, 0.0, 0.0, (1,), 0)]
    m = median_step(trace)
    assert (m.verify_ms, m.prep_ms, m.draft_ms, m.drafter_forwards) == (11.0, 1.5, 4.0, 3)
    assert m.num_accepted == (1, 2)
    with pytest.raises(ValueError):
        median_step([])

"""Acceptance on a given text (bench.forced): the forced engine reproduces the text, and on the
target's own greedy text it counts exactly what a plain ``generate`` counts."""
from __future__ import annotations

import pytest
import torch

from peagle_lab import step
from peagle_lab.bench.forced import acceptance_on_text, forced_target
from peagle_lab.config import SpecConfig
from peagle_lab.engine import SpecDecoder
from peagle_lab.testing import tiny_drafter, tiny_target

PROMPTS = [[1, 2, 3], [4], [5, 0, 5, 0], [3, 3]]


@pytest.fixture(scope="module")
def target():
    # a 6-token vocabulary: random drafts are often accepted, so the counters are not all zero
    return tiny_target(seed=2, vocab_size=6, eos_token_id=None)


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
@pytest.mark.parametrize("batch", [1, 3])
def test_on_its_own_greedy_text_the_counts_equal_a_plain_generate(target, method, batch):
    drafter = tiny_drafter(target, method, seed=4)
    spec = SpecConfig(method=method, num_speculative_tokens=4, max_new_tokens=30)
    own = SpecDecoder(target, drafter, spec).generate(PROMPTS[:3], eos_token_ids=())
    assert own.metrics.num_accepted_tokens > 0
    got = acceptance_on_text(target, drafter, spec, PROMPTS[:3], own.tokens, batch=batch)
    assert (got["num_drafts"], got["num_accepted_tokens"]) == (own.metrics.num_drafts, own.metrics.num_accepted_tokens)
    assert got["acceptance_length"] == pytest.approx(own.metrics.acceptance_length)
    assert len(got["per_request_al"]) == (3 if batch == 1 else 0)


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_a_foreign_text_is_reproduced_and_counted(target, method):
    g = torch.Generator().manual_seed(0)
    texts = [torch.randint(0, 6, (25,), generator=g).tolist() for _ in PROMPTS]
    drafter = tiny_drafter(target, method, seed=4)
    spec = SpecConfig(method=method, num_speculative_tokens=3)
    one = acceptance_on_text(target, drafter, spec, PROMPTS, texts)
    four = acceptance_on_text(target, drafter, spec, PROMPTS, texts, batch=4)
    assert one["acceptance_length"] == pytest.approx(four["acceptance_length"])  # batching changes nothing
    # every step keeps its accepted drafts plus one token: the steps tile each 24-token tail
    assert one["num_drafts"] + one["num_accepted_tokens"] >= 4 * 24
    assert 1.0 <= one["acceptance_length"] <= 4.0


def test_forced_logits_pick_the_next_token_and_the_patch_is_removed(target):
    seq = [1, 2, 3, 4, 5, 0]
    ids, pos = torch.tensor([seq[:4]]), torch.arange(4)[None]
    real = target(ids, pos).logits
    with forced_target(target, [seq]) as t:
        out = t(ids, pos)
        assert out.logits.argmax(-1).tolist() == [seq[1:5]]
        with pytest.raises(RuntimeError, match="already patched"):
            with forced_target(target, [seq]):
                pass
    assert "forward" not in vars(target)
    assert torch.equal(target(ids, pos).logits, real)


def test_positions_past_the_text_keep_the_real_logits(target):
    ids, pos = torch.tensor([[1, 2, 3]]), torch.arange(3)[None]
    real = target(ids, pos).logits
    with forced_target(target, [[1, 2]]):
        out = target(ids, pos).logits
    assert out[0, 0].argmax() == 2
    assert torch.equal(out[0, 1:], real[0, 1:])


def test_bad_input_gets_clear_errors(target):
    drafter = tiny_drafter(target, "peagle")
    spec = SpecConfig(method="peagle", num_speculative_tokens=2)
    with pytest.raises(ValueError, match="2 prompts but 1 outputs"):
        acceptance_on_text(target, drafter, spec, [[1], [2]], [[3]])
    with pytest.raises(ValueError, match="speculative method"):
        acceptance_on_text(target, None, SpecConfig(method="baseline"), [[1]], [[3]])
    with pytest.raises(ValueError, match=r"output lengths \[1, 2\]"):
        acceptance_on_text(target, drafter, spec, [[1], [2]], [[3], [3, 4]], batch=2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        with forced_target(target, [[1, 9]]):
            pass


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_the_counts_match_a_recount_of_the_recorded_drafts_against_the_text(target, method, monkeypatch):
    # every draft the engine made, checked against the forced text by hand: leading matches are accepted
    k, text = 3, torch.randint(0, 6, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    new = len(text) - k - 1  # every draft of every step stays inside the text
    drafts, real = [], step.draft

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        drafts.append(res.tokens[0].tolist())
        return res
    monkeypatch.setattr(step, "draft", spy)
    engine = SpecDecoder(target, tiny_drafter(target, method, seed=4),
                         SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=new, cuda_graphs=False))
    with forced_target(target, [PROMPTS[0] + text]):
        res = engine.generate([PROMPTS[0]], eos_token_ids=())
    assert res.tokens == [text[:new]]
    pos, steps, accepted = 0, 0, 0
    for d in drafts:
        if pos + 1 >= new:
            break
        n = next((j for j in range(k) if d[j] != text[pos + 1 + j]), k)
        pos, steps, accepted = pos + n + 1, steps + 1, accepted + n
    assert (res.metrics.num_drafts, res.metrics.num_accepted_tokens) == (steps, accepted) and accepted > 0


def test_the_patch_is_removed_when_generate_fails(target):
    with pytest.raises(RuntimeError, match="boom"):
        with forced_target(target, [[1, 2, 3]]):
            raise RuntimeError("boom")
    assert "forward" not in vars(target)


def test_prompts_too_wide_for_one_prefill_pass_are_refused(target):
    drafter = tiny_drafter(target, "peagle")
    wide = [[1] * (step.PREFILL_CHUNK_TOKENS // 4 + 1)] * 4
    with pytest.raises(ValueError, match="exceed one prefill pass"):
        acceptance_on_text(target, drafter, SpecConfig(method="peagle", num_speculative_tokens=2), wide,
                           [[3]] * 4, batch=4)

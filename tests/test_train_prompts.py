"""Prompt sources: filters, deduplication, exclusions, the Magpie prefix and stdlib prompts."""
from __future__ import annotations

import pytest

from peagle_lab.testing import tiny_target
from peagle_lab.train.prompts import (
    Deduper, Exclusions, PromptFilter, code_prompts, magpie_prompts, normalize_prompt, stdlib_functions,
    user_prefix_ids,
)
from peagle_lab.train.tiny import CharTokenizer


@pytest.mark.parametrize("text, reason", [
    ("How do I bake sourdough bread at home?", None),
    ("short", "too_short"),
    ("word " * 200, "too_long"),
    ("Tell me about <|im_start|> tokens please", "template_marker"),
    ("Supercalifragilistic expialidocious!", "too_few_words"),
    ("Что такое машинное обучение и как оно работает?", "not_ascii"),
    ("1234 5678 9012 3456 7890 ++++ ----", "not_prose"),
    ("the cat the cat the cat the cat the cat the cat the cat", "repetitive"),
])
def test_filter_reasons(text, reason):
    assert PromptFilter().reject_reason(text) == reason


def test_filter_config_is_checked():
    with pytest.raises(ValueError, match="min_ascii"):
        PromptFilter(min_ascii=1.5)


def test_dedup_catches_case_punctuation_and_shared_openings():
    d = Deduper()
    assert d.add("How do I sort a list in Python?")
    assert not d.add("how do i sort a list in python")
    long_a = "I am planning a trip to Japan next spring and would like to know the best places to visit"
    assert d.add(long_a)
    assert not d.add(long_a.replace("visit", "eat"))  # same first 12 words
    assert d.add("I am planning a trip to Peru")


def test_exclusions_match_after_normalisation_and_count_hits():
    ex = Exclusions(["What is the capital of France?", "   "])
    assert len(ex) == 1
    assert not ex.allows("  what is the CAPITAL of  france? ")
    assert ex.allows("What is the capital of Spain?")
    assert ex.hits == 1
    assert normalize_prompt("A\tB\nc") == "a b c"


def test_user_prefix_of_a_chat_template():
    assert CharTokenizer().decode(user_prefix_ids(CharTokenizer())) == "<|im_start|>user\n"
    assert CharTokenizer().decode(user_prefix_ids(CharTokenizer(), system="Be brief.")) == \
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"


def test_user_prefix_of_smollm2():
    from peagle_lab import zoo

    folder = zoo.cache_dir() / "models" / zoo.DEFAULT.name
    if not (folder / "tokenizer.json").is_file():
        pytest.skip("SmolLM2 is not converted in this cache")
    tok = zoo.load_tokenizer(folder)
    text = tok.decode(user_prefix_ids(tok))
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>user\n")


def test_stdlib_prompts_are_deterministic_and_grouped():
    fns = stdlib_functions(("textwrap", "shlex", "statistics"))
    assert fns == stdlib_functions(("textwrap", "shlex", "statistics"))
    names = {f"{f.module}.{f.name}" for f in fns}
    assert {"textwrap.dedent", "shlex.split", "statistics.median"} <= names
    assert all(f.summary and f.signature.startswith("(") for f in fns)
    ps = code_prompts(fns, per_function=2, seed=1)
    assert len(ps) == 2 * len(fns) and ps == code_prompts(fns, per_function=2, seed=1)
    assert {g for _, g in ps} == names
    blocked = Exclusions([ps[0][0]])
    assert ps[0] not in code_prompts(fns, per_function=2, seed=1, exclude=blocked) and blocked.hits == 1


def test_magpie_accounts_for_every_sample():
    target = tiny_target()
    kept, stats = magpie_prompts(target, CharTokenizer(), 20, max_new_tokens=12, concurrency=8, seed=0,
                                 progress=False)
    assert sum(stats.values()) == 20  # every sample is kept or has a reason
    assert all(PromptFilter().reject_reason(t) is None for t in kept)
    again, stats2 = magpie_prompts(target, CharTokenizer(), 20, max_new_tokens=12, concurrency=8, seed=0,
                                   progress=False)
    assert (again, stats2) == (kept, stats)  # seeded

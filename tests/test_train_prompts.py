"""Prompt sources: filters, deduplication, exclusions, the Magpie prefix and domains, follow-up turns,
stdlib, math and writing prompts."""
from __future__ import annotations

from collections import Counter

import pytest

from peagle_lab.testing import tiny_target
from peagle_lab.train.prompts import (
    MAGPIE_DOMAINS, Budget, Deduper, Exclusions, PromptFilter, assign_domains, code_prompts, follow_up_turns,
    join_turn, magpie_prompts, normalize_prompt, stdlib_functions, turn_joints, user_prefix_ids,
)
from peagle_lab.train.prompts_synthetic import math_prompts, writing_prompts
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


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from peagle_lab import zoo

    folder = zoo.cache_dir() / "models" / zoo.DEFAULT.name
    if not (folder / "tokenizer.json").is_file():
        pytest.skip("SmolLM2 is not converted in this cache")
    return zoo.load_tokenizer(folder)


def test_user_prefix_of_smollm2(smollm2_tokenizer):
    tok = smollm2_tokenizer
    text = tok.decode(user_prefix_ids(tok))
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>user\n")
    math = dict((name, system) for name, system, _ in MAGPIE_DOMAINS)["math"]
    assert tok.decode(user_prefix_ids(tok, math)) == f"<|im_start|>system\n{math}<|im_end|>\n<|im_start|>user\n"


def test_a_second_turn_renders_like_the_template(smollm2_tokenizer):
    from peagle_lab.chat import encode_chat

    tok = smollm2_tokenizer
    to_user, to_assistant = turn_joints(tok)
    assert tok.decode(to_user) == "<|im_end|>\n<|im_start|>user\n"
    assert tok.decode(to_assistant) == "<|im_end|>\n<|im_start|>assistant\n"
    first = encode_chat(tok, "Name three colours.")
    reply = tok("Red, green and blue.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    conv = join_turn(first + reply, to_user)
    ids = join_turn(conv + tok("Which is warmest?", add_special_tokens=False)["input_ids"], to_assistant)
    assert ids == encode_chat(tok, [{"role": "user", "content": "Name three colours."},
                                    {"role": "assistant", "content": "Red, green and blue."},
                                    {"role": "user", "content": "Which is warmest?"}])


def test_stdlib_prompts_are_deterministic_and_grouped():
    fns = stdlib_functions(("textwrap", "shlex", "statistics"))
    assert fns == stdlib_functions(("textwrap", "shlex", "statistics"))
    names = {f"{f.module}.{f.name}" for f in fns}
    assert {"textwrap.dedent", "shlex.split", "statistics.median"} <= names
    assert all(f.summary and f.signature.startswith("(") for f in fns)
    moved = {f.name: f.signature for f in stdlib_functions(("shutil",))}["move"]
    assert moved == "(src, dst, copy_function=copy2)"  # no memory address: the same text in every process
    ps = code_prompts(fns, per_function=2, seed=1)
    assert len(ps) == 2 * len(fns) and ps == code_prompts(fns, per_function=2, seed=1)
    assert {g for _, g in ps} == names
    blocked = Exclusions([ps[0][0]])
    assert ps[0] not in code_prompts(fns, per_function=2, seed=1, exclude=blocked) and blocked.hits == 1


def test_magpie_accounts_for_every_sample():
    target = tiny_target()
    kept, stats = magpie_prompts(target, CharTokenizer(), 20, max_new_tokens=12, concurrency=8, seed=0,
                                 progress=False)
    assert sum(sum(c.values()) for c in stats.values()) == 20  # every sample is kept or has a reason
    assert {d: sum(c.values()) for d, c in stats.items()} == dict(Counter(assign_domains(20, MAGPIE_DOMAINS, 0)))
    assert all(PromptFilter().reject_reason(t) is None and d in stats for t, d in kept)
    again, stats2 = magpie_prompts(target, CharTokenizer(), 20, max_new_tokens=12, concurrency=8, seed=0,
                                   progress=False)
    assert (again, stats2) == (kept, stats)  # seeded
    _, cut = magpie_prompts(target, CharTokenizer(), 20, max_new_tokens=12, concurrency=8, seed=0, progress=False,
                            budget=Budget(max_tokens=1))
    assert sum(c["skipped_budget"] for c in cut.values()) == 13  # the first temperature's 7 prefixes ran, then the budget stopped the rest


def test_domains_are_spread_by_weight_and_seeded():
    weights = {name: w for name, _, w in MAGPIE_DOMAINS}
    assert len(weights) == len(MAGPIE_DOMAINS)  # domain names are unique (the data card counts by name)
    n = 10 * sum(weights.values())  # divides exactly: every domain gets 10 samples per unit of weight
    names = assign_domains(n, MAGPIE_DOMAINS, seed=4)
    assert Counter(names) == {name: 10 * w for name, w in weights.items()}
    assert names == assign_domains(n, MAGPIE_DOMAINS, seed=4) != assign_domains(n, MAGPIE_DOMAINS, seed=5)
    assert sorted(assign_domains(7, (("a", None, 2), ("b", None, 1)), seed=0)) == ["a"] * 5 + ["b"] * 2
    assert len(assign_domains(4, MAGPIE_DOMAINS, seed=0)) == 4


def test_follow_up_turns_continue_a_conversation():
    tok = CharTokenizer()
    to_user, to_assistant = turn_joints(tok)
    assert tok.decode(to_user) == "<|im_end|>\n<|im_start|>user\n"
    assert tok.decode(to_assistant) == "<|im_end|>\n<|im_start|>assistant\n"
    first = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True) + tok("yo")[
        "input_ids"] + [tok.eos_token_id]
    assert tok.decode(join_turn(first, to_user)).endswith("yo<|im_end|>\n<|im_start|>user\n")  # no second <|im_end|>
    convs = [join_turn(first, to_user)] * 10
    turns, stats = follow_up_turns(tiny_target(), tok, convs, max_new_tokens=12, concurrency=4, seed=1,
                                   progress=False)
    assert len(turns) == 10 and sum(stats.values()) == 10 and stats["kept"] == sum(t is not None for t in turns)


def test_math_prompts_are_seeded_distinct_and_excluded():
    ps = math_prompts(200, seed=7)
    assert len(ps) == 200 and ps == math_prompts(200, seed=7) and ps != math_prompts(200, seed=8)
    assert len({normalize_prompt(t) for t, _ in ps}) == 200 and all(g == t for t, g in ps)
    assert any("Solve for x" in t for t, _ in ps) and any("%" in t for t, _ in ps)
    assert all("{" not in t for t, _ in ps)  # every field filled
    blocked = Exclusions([ps[0][0], ps[5][0].upper()])
    kept = math_prompts(200, seed=7, exclude=blocked)
    assert ps[0] not in kept and ps[5] not in kept and blocked.hits == 2
    with pytest.raises(ValueError, match="n=-1"):
        math_prompts(-1)


def test_writing_prompts_are_seeded_grouped_and_excluded():
    ps = writing_prompts(300, seed=2)
    assert len(ps) == 300 and ps == writing_prompts(300, seed=2) and ps != writing_prompts(300, seed=3)
    assert len({t for t, _ in ps}) == 300 and all(g.startswith("writing/") for _, g in ps)
    assert len({g.split("/")[1] for _, g in ps}) > 5  # many forms
    assert len({g for _, g in ps}) < 300  # variants of one task share a group
    blocked = Exclusions([ps[1][0]])
    assert ps[1] not in writing_prompts(300, seed=2, exclude=blocked) and blocked.hits == 1
    with pytest.raises(ValueError, match="n=-2"):
        writing_prompts(-2)

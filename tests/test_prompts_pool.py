"""The hand-written request pool and the "openings" Magpie domain (peagle_lab.train.prompts_pool)."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from peagle_lab.testing import CHAT_PROMPTS, tiny_target
from peagle_lab.train.data import DataConfig
from peagle_lab.train.prompts import (
    MAGPIE_DOMAINS, Deduper, PromptFilter, _verdicts, magpie_prompts, sample_user_turns, user_prefix_ids,
)
from peagle_lab.train.prompts_pool import POOL_PATH, RequestOpenings, load_request_pool
from peagle_lab.train.tiny import CharTokenizer


def test_the_pool_is_large_varied_and_clean():
    rows = [json.loads(line) for line in POOL_PATH.read_text().splitlines()]
    kinds = Counter(r["kind"] for r in rows)
    assert len(rows) >= 150 and len(kinds) >= 8 and min(kinds.values()) >= 10
    assert len({r["id"] for r in rows}) == len(rows)
    pool = load_request_pool()
    assert pool == tuple(r["text"] for r in rows)
    # short math items may read as symbols ("Expand (x + 3)(x - 7).") but none is long, non-ASCII or templated
    assert [t for t in pool if PromptFilter().reject_reason(t) not in (None, "not_prose", "too_few_words")] == []
    d = Deduper()
    assert [t for t in pool if not d.add(t)] == []  # no request repeats another


def test_no_pool_request_is_or_nearly_is_a_benchmark_or_demo_prompt():
    from peagle_lab.bench.workloads import chat_prompts

    bench = Deduper()
    for text in [p["text"] for p in chat_prompts()] + list(CHAT_PROMPTS):
        bench.add(text)
    assert [t for t in load_request_pool() if t in bench] == []
    first_words = {" ".join(p["text"].split()[:6]).casefold() for p in chat_prompts()}
    assert [t for t in load_request_pool() if " ".join(t.split()[:6]).casefold() in first_words] == []


@pytest.mark.parametrize("line, match", [
    ('["a list"]', "expected a JSON object"),
    ("not json", "expected a JSON object"),
    ('{"text": ""}', "non-empty string"),
    ('{"kind": "x"}', "non-empty string"),
])
def test_a_bad_pool_line_names_the_line(tmp_path, line, match):
    f = tmp_path / "pool.jsonl"
    f.write_text('{"text": "Write a poem about rain."}\n' + line + "\n")
    with pytest.raises(ValueError, match=f"pool.jsonl:2: .*{match}"):
        load_request_pool(f)


def test_an_empty_pool_and_bad_openings_are_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="holds no requests"):
        load_request_pool(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match="pool is empty"):
        RequestOpenings(())
    with pytest.raises(ValueError, match="max_words=0"):
        RequestOpenings(("Write a poem.",), max_words=0)
    with pytest.raises(ValueError, match="opening_weight"):
        DataConfig(opening_weight=-1)


def test_openings_are_the_first_words_of_pool_requests_and_seeded():
    o = RequestOpenings(load_request_pool(), max_words=3)
    got = [o.opening(random.Random(s)) for s in range(300)]
    assert got == [o.opening(random.Random(s)) for s in range(300)]
    assert all(any(t.split()[: len(g.split())] == g.split() for t in o.pool) for g in got)
    assert Counter(len(g.split()) for g in got).keys() == {1, 2, 3}
    assert len(set(got)) > 100


def _replying(monkeypatch, tok, reply: str):
    """The target's sampler, replaced: every prompt gets ``reply`` then EOS (the tiny target rarely ends a turn)."""
    from peagle_lab.train import prompts

    calls = []

    def fake(target, batch, **kw):
        calls.append(batch)
        return [tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for _ in batch]
    monkeypatch.setattr(prompts, "decode_all", fake)
    return calls


def test_a_user_turn_is_decoded_with_its_opening(monkeypatch):
    tok = CharTokenizer()
    calls = _replying(monkeypatch, tok, " are a pirate.")
    opening = tok("Pretend you", add_special_tokens=False)["input_ids"]
    texts, skipped = sample_user_turns(tiny_target(), tok, [user_prefix_ids(tok) + opening] * 2,
                                       temperatures=(1.0,), max_new_tokens=64, concurrency=4, seed=0,
                                       progress=False, openings=[opening] * 2)
    assert texts == ["Pretend you are a pirate."] * 2 and not skipped
    assert calls[0][0] == user_prefix_ids(tok) + opening  # the target continues the opening
    plain, _ = sample_user_turns(tiny_target(), tok, [user_prefix_ids(tok)], temperatures=(1.0,), max_new_tokens=64,
                                 concurrency=4, seed=0, progress=False)
    assert plain == ["are a pirate."]


def test_a_sample_that_copies_a_pool_request_is_dropped():
    examples = Deduper()
    examples.add("Why does ice float on water?")
    verdicts = _verdicts(["why does ice float on water", "Why does ice sink in oil?", None], set(), PromptFilter(),
                         None, examples)
    assert verdicts == ["copied_example", "kept", "unfinished"]


def test_magpie_with_the_openings_domain_accounts_for_every_sample(monkeypatch):
    cfg = DataConfig(opening_weight=13)
    domains = cfg.magpie_domains()
    assert domains[: len(MAGPIE_DOMAINS)] == MAGPIE_DOMAINS and domains[-1][0] == "openings"
    assert DataConfig().magpie_domains() == MAGPIE_DOMAINS  # off by default: earlier seeds make the same data
    pool = domains[-1][1].pool
    tok = CharTokenizer()
    calls = _replying(monkeypatch, tok, " and tell me a story about seven quiet lighthouses")
    kept, stats = magpie_prompts(tiny_target(), tok, 40, domains=domains, concurrency=8, seed=0, progress=False)
    assert sum(sum(c.values()) for c in stats.values()) == 40
    assert sum(stats["openings"].values()) == 20  # half the weight
    opened = [t for t, d in kept if d == "openings"]
    # every openings turn starts with a pool request's first words; the others are the reply alone (one kept,
    # the rest duplicates of it)
    assert len(opened) >= 10 and all(any(t.startswith(p.split()[0] + " ") for p in pool) for t in opened)
    assert sum(stats[d]["kept"] for d, _, _ in MAGPIE_DOMAINS) == 1
    assert sum(len(b) for b in calls) == 40
    assert str(domains[-1][1]).startswith("openings: the user turn begins with the first 1-3 words of ")

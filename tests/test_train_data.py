"""Data synthesis: benchmark prompts never enter, most data is greedy, two-turn examples train only their last
turn, the card is honest, shards are verified."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from peagle_lab.chat import encode_chat
from peagle_lab.testing import CHAT_PROMPTS, tiny_target
from peagle_lab.train import data as data_mod
from peagle_lab.train.data import DataConfig, Example, load_split, split_groups, synthesize
from peagle_lab.train.prompts import StdlibFunction, normalize_prompt, turn_joints
from peagle_lab.train.targets import collate
from peagle_lab.train.tiny import CharTokenizer

BENCHMARK = ["Write a function that returns the sum of two integers a and b.",
             "def has_close_elements(numbers, threshold): check whether any two numbers are closer than threshold"]
MAGPIE = ["Can you suggest a name for my new bakery?", BENCHMARK[0], "  what is the capital of FRANCE?  ",
          "How do I keep basil alive indoors?", "Give me a packing list for a weekend hike.",
          "What should I read after finishing Dune?", "How can I learn to juggle three balls?"]


FOLLOW_UP = "Could you explain that again, more simply?"


def _stub_sources(mp) -> None:
    """The tiny random model writes noise, so Magpie and its follow-ups are stubbed with fixed turns that
    include benchmark prompts (synthesize itself must drop them), and the stdlib with six functions."""
    mp.setattr(data_mod, "magpie_prompts", lambda *a, **k: (
        [(t, "math" if i % 2 else "general") for i, t in enumerate(MAGPIE)],
        {"general": Counter(kept=4), "math": Counter(kept=3)}))
    mp.setattr(data_mod, "follow_up_turns", lambda target, tok, convs, **k: (
        [FOLLOW_UP] * len(convs), Counter(kept=len(convs))))
    mp.setattr(data_mod, "stdlib_functions", lambda mods: [
        StdlibFunction("m", f"f{i}", "(x)", f"Return x plus {i}.") for i in range(6)])


CFG = DataConfig(num_magpie=8, max_code_prompts=12, max_math_prompts=4, max_writing_prompts=4, response_max_tokens=10,
                 heldout_fraction=0.25, multi_turn_fraction=0.5, concurrency=4, shard_rows=5, seed=3)


def _target():
    """The tiny target, with a quarter of its vocabulary ending a turn so most first replies finish."""
    return tiny_target(eos_token_id=[2, *range(40, 64)])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    _stub_sources(mp)
    out = tmp_path_factory.mktemp("data")
    card = synthesize(_target(), CharTokenizer(), CFG, out, exclude=BENCHMARK, target_name="tiny", progress=False,
                      log=lambda *_: None)
    mp.undo()
    return out, card, CFG


def test_benchmark_and_demo_prompts_never_enter(dataset):
    out, card, _ = dataset
    rows = load_split(out, "train") + load_split(out, "heldout")
    banned = {normalize_prompt(t) for t in BENCHMARK + list(CHAT_PROMPTS)}
    assert rows and not {normalize_prompt(r.prompt) for r in rows} & banned
    assert card["exclusions"]["hits"] >= 2  # the benchmark turn and the case-mangled demo prompt


def test_heldout_is_disjoint_by_group_and_greedy(dataset):
    out, _, _ = dataset
    train, held = load_split(out, "train"), load_split(out, "heldout")
    assert held and not {r.group for r in train} & {r.group for r in held}
    assert {r.response for r in held} == {"greedy"} and {r.response for r in train} == {"greedy", "sampled"}
    assert not any(r.follow_up for r in held)


def test_every_prompt_is_greedy_and_a_seeded_quarter_also_sampled(dataset):
    out, card, cfg = dataset
    single = [r for r in load_split(out, "train") if not r.follow_up]
    prompts = {r.prompt for r in single}
    per_prompt = Counter((r.prompt, r.response) for r in single)
    assert set(per_prompt.values()) == {1} and {p for p, resp in per_prompt if resp == "greedy"} == prompts
    sampled = {p for p, resp in per_prompt if resp == "sampled"}
    assert len(sampled) == round(cfg.sampled_fraction * len(prompts)) == card["responses"]["sampled_prompts"]
    s = card["splits"]["train"]
    assert s["greedy_share"] >= 0.7 and s["greedy_token_share"] >= 0.7 and s["greedy_assistant_token_share"] >= 0.7
    assert s["greedy_share"] == s["by_response"]["greedy"] / s["examples"]


def test_two_turn_examples_extend_a_single_turn_one_and_train_only_the_last_turn(dataset):
    out, card, _ = dataset
    tok = CharTokenizer()
    rows = load_split(out, "train")
    two = [r for r in rows if r.follow_up]
    assert two and all(r.follow_up == FOLLOW_UP and r.response == "greedy" for r in two)
    assert card["splits"]["train"]["multi_turn"] == len(two) == card["responses"]["follow_ups"]["kept"]
    to_user, to_assistant = turn_joints(tok)
    for r in two:
        first = next(s for s in rows if s.prompt == r.prompt and s.response == "greedy" and not s.follow_up)
        assert first.finished and r.input_ids[:len(first.input_ids)] == first.input_ids
        middle = tok.decode(r.input_ids[len(first.input_ids):r.assistant_start])
        assert middle.endswith(f"<|im_start|>user\n{FOLLOW_UP}<|im_end|>\n<|im_start|>assistant\n")
    batch = collate(two, 512)
    for b, r in enumerate(two):  # the first reply is trained by its single-turn example already
        assert batch.loss_mask[b].nonzero()[:, 0].tolist() == list(range(r.assistant_start, len(r.input_ids)))


def test_loss_mask_covers_only_the_assistant_turn(dataset):
    out, _, _ = dataset
    tok = CharTokenizer()
    rows = [r for r in load_split(out, "train") if not r.follow_up]
    for r in rows:
        assert r.prompt_ids == encode_chat(tok, r.prompt)  # the prompt part ends with "assistant\n"
    batch = collate(rows, 512)
    for b, r in enumerate(rows):
        assert batch.loss_mask[b].nonzero()[:, 0].tolist() == list(range(r.assistant_start, len(r.input_ids)))


def test_sources_and_domains_are_counted(dataset):
    out, card, cfg = dataset
    rows = load_split(out, "train") + load_split(out, "heldout")
    assert {r.source for r in rows} == {"magpie", "code", "math", "writing"}
    assert {r.domain for r in rows if r.source == "magpie"} == {"general", "math"}
    assert all(r.domain == r.source for r in rows if r.source != "magpie")
    src = card["sources"]
    assert src["math"]["prompts"] == cfg.max_math_prompts and src["writing"]["prompts"] == cfg.max_writing_prompts
    assert src["magpie"]["by_domain"]["math"] == {"kept": 3} and set(src["magpie"]["domains"]) >= {"general", "math"}
    assert card["splits"]["train"]["by_domain"]["math"] >= 1


def test_a_row_without_the_new_fields_still_loads():
    old = {"prompt": "p", "source": "magpie", "group": "p", "response": "greedy", "input_ids": [1, 2, 3],
           "assistant_start": 1, "finished": True}
    e = Example(**old)
    assert (e.domain, e.follow_up, e.prompt_ids) == ("", "", [1])


def test_card_counts_match_the_shards(dataset):
    out, card, cfg = dataset
    on_disk = json.loads((out / "card.json").read_text())
    assert on_disk == json.loads(json.dumps(card))
    for split in ("train", "heldout"):
        rows = load_split(out, split)
        s = card["splits"][split]
        assert s["examples"] == len(rows) == sum(e["rows"] for e in card["shards"][split])
        assert s["tokens"] == sum(len(r.input_ids) for r in rows)
        assert s["assistant_tokens"] == sum(len(r.input_ids) - r.assistant_start for r in rows)
    assert len(card["shards"]["train"]) > 1  # shard_rows=5 splits it
    assert card["seed"] == 3 and card["config"]["seed"] == 3 and card["config"]["sample_temperature"] == 0.8
    assert card["world_size"] == 1 and {e["rank"] for s in ("train", "heldout") for e in card["shards"][s]} == {0}
    assert card["sources"]["code"]["functions"] == 6 and "python" in card and "torch" in card
    tp = card["throughput"]
    assert [r["rank"] for r in tp["per_rank"]] == [0]
    assert set(tp["phases"]) == {"magpie", "heldout", "greedy", "follow_up", "multi_turn", "sampled"}
    assert tp["total"]["tokens"] == sum(p["tokens"] for p in tp["phases"].values()) > 0
    assistant = card["splits"]["train"]["assistant_tokens"] + card["splits"]["heldout"]["assistant_tokens"]
    assert tp["total"]["tokens"] == assistant  # Magpie and follow-ups are stubbed: responses are all it generated
    assert tp["total"]["tokens_per_s"] > 0 and not card["stopped_by_token_target"]
    greedy = tp["per_rank"][0]["phases"]["greedy"]["engine"]  # where the generation time went
    assert greedy["prefills"] >= 1 and greedy["steps"] >= 1 and greedy["decode_tokens"] <= greedy["row_steps"]
    assert 0 < greedy["row_use"] <= 1 and greedy["step_ms"] > 0 and isinstance(greedy["steps"], int)
    assert greedy["prefill_s"] > 0 and greedy["decode_s"] > 0 and greedy["other_s"] >= 0
    assert greedy["decode_tokens"] == tp["per_rank"][0]["phases"]["greedy"]["tokens"] - greedy_requests(card)
    md = (out / "card.md").read_text()
    assert f"| train | {card['splits']['train']['examples']} |" in md and "tok/s" in md
    assert "| 0 | greedy |" in md and f"| {100 * greedy['row_use']:.0f} % |" in md


def greedy_requests(card) -> int:
    return card["throughput"]["per_rank"][0]["phases"]["greedy"]["done"]


def test_cards_written_before_the_engine_split_render_dashes(dataset):
    import copy

    from peagle_lab.train.data_files import card_markdown

    old = copy.deepcopy(dataset[1])
    for r in old["throughput"]["per_rank"]:
        for p in r["phases"].values():
            del p["engine"]
    row = next(line for line in card_markdown(old).splitlines() if line.startswith("| 0 | greedy |"))
    assert row.endswith(" | ".join(["—"] * 6) + " |")


def test_tampered_or_incomplete_folders_are_refused(dataset, tmp_path):
    out, card, _ = dataset
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in out.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    shard = copy / card["shards"]["train"][0]["file"]
    shard.write_text(shard.read_text().replace('"greedy"', '"sampled"', 1))
    with pytest.raises(ValueError, match="sha256"):
        load_split(copy, "train")
    with pytest.raises(ValueError, match="split='test'"):
        load_split(copy, "test")
    (copy / "card.json").unlink()
    with pytest.raises(ValueError, match="card.json"):
        load_split(copy, "train")


def test_same_seed_same_data(dataset, tmp_path, monkeypatch):
    out, card, cfg = dataset
    _stub_sources(monkeypatch)
    (tmp_path / "train-r03-00000.jsonl").write_text("stale\n")  # an earlier run's shard is removed
    again = synthesize(_target(), CharTokenizer(), cfg, tmp_path, exclude=BENCHMARK, progress=False,
                       log=lambda *_: None)
    assert again["shards"] == card["shards"]  # same files, same sha256
    assert sorted(f.name for f in tmp_path.glob("*.jsonl")) == sorted(
        e["file"] for s in ("train", "heldout") for e in card["shards"][s])


def test_a_token_target_keeps_held_out_and_greedy_first(tmp_path, monkeypatch):
    _stub_sources(monkeypatch)
    cfg = dataclasses.replace(CFG, target_tokens=60)
    card = synthesize(_target(), CharTokenizer(), cfg, tmp_path, exclude=BENCHMARK, progress=False,
                      log=lambda *_: None)
    phases = card["throughput"]["phases"]
    assert card["stopped_by_token_target"] and phases["sampled"]["done"] == 0
    assert phases["heldout"]["done"] == phases["heldout"]["requests"]  # the held-out split came first
    assert card["splits"]["train"]["greedy_share"] == 1.0
    assert 60 <= card["throughput"]["total"]["tokens"] < 60 + cfg.concurrency * cfg.response_max_tokens


def test_split_groups_is_seeded():
    groups = [f"g{i}" for i in range(100)]
    a = split_groups(groups, 0.1, 50, seed=1)
    assert len(a) == 10 and a == split_groups(groups, 0.1, 50, seed=1) and a != split_groups(groups, 0.1, 50, seed=2)
    assert len(split_groups(groups, 0.5, 7, seed=0)) == 7


@pytest.mark.parametrize("kw, word", [({"concurrency": 0}, "concurrency"), ({"heldout_fraction": 1.0}, "heldout"),
                                      ({"magpie_temperatures": ()}, "magpie_temperatures"),
                                      ({"time_budget_s": 0}, "time_budget_s"),
                                      ({"sampled_fraction": 1.5}, "sampled_fraction=1.5"),
                                      ({"multi_turn_fraction": -0.1}, "multi_turn_fraction"),
                                      ({"target_tokens": 0}, "target_tokens=0"),
                                      ({"max_math_prompts": -1}, "max_math_prompts")])
def test_config_names_the_bad_value(kw, word):
    with pytest.raises(ValueError, match=word):
        DataConfig(**kw)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_responses_are_one_stream_and_match_the_stream_decoder(temperature):
    from peagle_lab.stream import StreamDecoder
    from peagle_lab.train.prompts import Budget

    target = _target()
    prompts = [(f"p{i}", "magpie", f"g{i}", [5 + i] * (3 + i % 4)) for i in range(7)]
    budget = Budget()
    got = data_mod.generate_responses(target, prompts, temperature=temperature, max_new_tokens=12, concurrency=2,
                                      seed=7, budget=budget, progress=False)
    ref = StreamDecoder(target, concurrency=2, temperature=temperature, seed=7).generate(
        [p[3] for p in prompts], 12, tuple(target.config.eos_token_ids))
    assert [e.input_ids[e.assistant_start:] for e in got] == ref.tokens
    assert [e.prompt for e in got] == [p[0] for p in prompts]
    assert all(e.response == ("greedy" if temperature == 0 else "sampled") for e in got)
    e = budget.engine
    assert budget.tokens == sum(len(t) for t in ref.tokens) and e["prefills"] >= 4 and e["steps"] >= 1
    assert e["decode_tokens"] == budget.tokens - 7 <= e["row_steps"]


def test_a_spent_budget_admits_no_prompt():
    from peagle_lab.train.prompts import Budget

    budget = Budget(max_tokens=1)
    budget.add(1)
    got = data_mod.generate_responses(_target(), [("p", "magpie", "g", [5, 6, 7])], temperature=0.0,
                                      max_new_tokens=8, concurrency=4, seed=0, budget=budget, progress=False)
    assert got == [] and budget.stopped_by == "token_target"


def test_a_run_can_leave_out_a_domain_and_says_which(dataset, tmp_path, capsys):
    """``train --exclude-domains``: the data ablation trains on the rest, keeps the held-out split whole, and a
    domain the data does not have is an error naming it."""
    from peagle_lab.train.cli import main

    out, card, _ = dataset
    train = load_split(out, "train")
    general = sum(r.domain == "general" for r in train)
    assert 0 < general < len(train)
    args = ["train", "--tiny", "--data", str(out), "--method", "peagle", "--steps", "2", "--batch-size", "2",
            "--row-len", "32", "--k-train", "2", "--draft-vocab-size", "64", "--no-eval", "--no-progress",
            "--ckpt-every", "0"]
    assert main([*args, "--out", str(tmp_path / "run"), "--exclude-domains", "general"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["train_examples"] == len(train) - general and summary["excluded_domains"] == ["general"]
    assert summary["heldout_examples"] == len(load_split(out, "heldout"))
    assert f"left out {{'general': {general}}}" in capsys.readouterr().out
    assert main([*args, "--out", str(tmp_path / "bad"), "--exclude-domains", "poetry"]) == 2
    err = capsys.readouterr().err
    assert "exclude domains ['poetry']: the training data has no such domain; it has" in err and "general" in err
    tiny_only = ["train", "--tiny", "--method", "peagle", "--out", str(tmp_path / "none"), "--exclude-domains", "x"]
    assert main(tiny_only) == 2 and "--exclude-domains x needs --data" in capsys.readouterr().err

"""Data synthesis: benchmark prompts never enter, the card is honest, shards are verified."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from peagle_lab.chat import encode_chat
from peagle_lab.testing import CHAT_PROMPTS, tiny_target
from peagle_lab.train import data as data_mod
from peagle_lab.train.data import DataConfig, load_split, split_groups, synthesize
from peagle_lab.train.prompts import StdlibFunction, normalize_prompt
from peagle_lab.train.targets import collate
from peagle_lab.train.tiny import CharTokenizer

BENCHMARK = ["Write a function that returns the sum of two integers a and b.",
             "def has_close_elements(numbers, threshold): check whether any two numbers are closer than threshold"]
MAGPIE = ["Can you suggest a name for my new bakery?", BENCHMARK[0], "  what is the capital of FRANCE?  ",
          "How do I keep basil alive indoors?", "Give me a packing list for a weekend hike.",
          "What should I read after finishing Dune?", "How can I learn to juggle three balls?"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    # The tiny random model writes noise, so Magpie is stubbed with fixed turns that include
    # benchmark prompts; synthesize itself must drop them.
    mp.setattr(data_mod, "magpie_prompts", lambda *a, **k: (list(MAGPIE), Counter(kept=len(MAGPIE))))
    mp.setattr(data_mod, "stdlib_functions", lambda mods: [
        StdlibFunction("m", f"f{i}", "(x)", f"Return x plus {i}.") for i in range(6)])
    out = tmp_path_factory.mktemp("data")
    cfg = DataConfig(num_magpie=8, max_code_prompts=12, response_max_tokens=10, heldout_fraction=0.25, concurrency=4,
                     shard_rows=5, seed=3)
    card = synthesize(tiny_target(), CharTokenizer(), cfg, out, exclude=BENCHMARK, target_name="tiny", progress=False,
                      log=lambda *_: None)
    mp.undo()
    return out, card, cfg


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
    # every training prompt has one greedy and one sampled response
    per_prompt = Counter((r.prompt, r.response) for r in train)
    assert set(per_prompt.values()) == {1} and len(per_prompt) == 2 * len({r.prompt for r in train})


def test_loss_mask_covers_only_the_assistant_turn(dataset):
    out, _, _ = dataset
    tok = CharTokenizer()
    rows = load_split(out, "train")
    for r in rows:
        assert r.prompt_ids == encode_chat(tok, r.prompt)  # the prompt part ends with "assistant\n"
    batch = collate(rows, 512)
    for b, r in enumerate(rows):
        assert batch.loss_mask[b].nonzero()[:, 0].tolist() == list(range(r.assistant_start, len(r.input_ids)))


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
    assert card["sources"]["code"]["functions"] == 6 and "python" in card and "torch" in card
    md = (out / "card.md").read_text()
    assert f"| train | {card['splits']['train']['examples']} |" in md


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
    monkeypatch.setattr(data_mod, "magpie_prompts", lambda *a, **k: (list(MAGPIE), Counter(kept=len(MAGPIE))))
    monkeypatch.setattr(data_mod, "stdlib_functions", lambda mods: [
        StdlibFunction("m", f"f{i}", "(x)", f"Return x plus {i}.") for i in range(6)])
    again = synthesize(tiny_target(), CharTokenizer(), cfg, tmp_path, exclude=BENCHMARK, progress=False,
                       log=lambda *_: None)
    assert again["shards"] == card["shards"]  # same files, same sha256


def test_split_groups_is_seeded():
    groups = [f"g{i}" for i in range(100)]
    a = split_groups(groups, 0.1, 50, seed=1)
    assert len(a) == 10 and a == split_groups(groups, 0.1, 50, seed=1) and a != split_groups(groups, 0.1, 50, seed=2)
    assert len(split_groups(groups, 0.5, 7, seed=0)) == 7


@pytest.mark.parametrize("kw, word", [({"concurrency": 0}, "concurrency"), ({"heldout_fraction": 1.0}, "heldout"),
                                      ({"magpie_temperatures": ()}, "magpie_temperatures"),
                                      ({"time_budget_s": 0}, "time_budget_s")])
def test_config_names_the_bad_value(kw, word):
    with pytest.raises(ValueError, match=word):
        DataConfig(**kw)

"""Offline training data: prompts (``prompts.py``) → target responses → sharded JSONL + a data card.

The paper regenerates every response with the target itself, so the drafter learns the
target's own continuations. ``synthesize`` does the same with the batched engine:

1. Magpie user turns sampled from the target, filtered, deduplicated; coding prompts from
   standard-library signatures; every prompt checked against ``Exclusions``;
2. a held-out split *by prompt group* (all prompts about one stdlib function fall on one
   side), so the held-out acceptance measures prompts the drafter never saw;
3. a greedy response for every prompt (what temperature-0 serving produces) and a sampled
   one for every training prompt (more varied continuations);
4. ``train-XXXXX.jsonl`` / ``heldout-XXXXX.jsonl`` shards, each written atomically, and last
   ``card.json`` + ``card.md`` (sources, counts, tokens, seeds, versions, timings), which
   ``load_split`` requires, so a half-written folder is never read as data.

A row: ``{"prompt", "source", "group", "response", "input_ids", "assistant_start",
"finished"}``; ``input_ids[assistant_start:]`` is the assistant's part, the only part with a loss.
"""
from __future__ import annotations

import json
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

import torch

from ..chat import encode_chat
from ..config import SpecConfig, check_int
from ..engine import SpecDecoder
from ..models.checkpoints import atomic_path, sha256_file, write_json
from .prompts import STDLIB_MODULES, Exclusions, PromptFilter, code_prompts, magpie_prompts, stdlib_functions

FORMAT = "peagle_lab.data/1"


@dataclass(frozen=True)
class DataConfig:
    """How much data ``synthesize`` makes and how (every field lands in the data card)."""

    num_magpie: int = 6144  # user turns sampled (before filtering and deduplication)
    magpie_temperatures: tuple[float, ...] = (0.7, 0.9, 1.0)  # cycled over sampling chunks
    magpie_max_tokens: int = 64  # a user turn longer than this is dropped as unfinished
    code_per_function: int = 2  # coding prompts per stdlib function (different templates)
    max_code_prompts: int = 1024
    response_max_tokens: int = 256
    sample_temperature: float = 0.8  # the sampled response (the other one is greedy)
    heldout_fraction: float = 0.04
    heldout_max: int = 256  # prompt groups held out at most
    concurrency: int = 256  # requests the engine decodes together
    shard_rows: int = 4096
    seed: int = 0
    time_budget_s: float | None = None  # stop starting generation chunks after this long

    def __post_init__(self) -> None:
        check_int("num_magpie", self.num_magpie, 0)
        check_int("magpie_max_tokens", self.magpie_max_tokens, 4, 1024)
        check_int("code_per_function", self.code_per_function, 0, 5)
        check_int("max_code_prompts", self.max_code_prompts, 0)
        check_int("response_max_tokens", self.response_max_tokens, 1, 4096)
        check_int("heldout_max", self.heldout_max, 0)
        check_int("concurrency", self.concurrency, 1, 8192)
        check_int("shard_rows", self.shard_rows, 1)
        check_int("seed", self.seed, 0)
        if not self.magpie_temperatures or any(not 0.0 < t <= 2.0 for t in self.magpie_temperatures):
            raise ValueError(f"magpie_temperatures={self.magpie_temperatures} must be non-empty, each in (0, 2]")
        if not 0.0 < self.sample_temperature <= 2.0:
            raise ValueError(f"sample_temperature={self.sample_temperature} is out of range; expected (0, 2]")
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction={self.heldout_fraction} is out of range; expected [0, 1)")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s={self.time_budget_s} must be > 0 (or None for no budget)")


@dataclass(frozen=True)
class Example:
    """One training sequence: a chat prompt and the target's response, as token ids."""

    prompt: str
    source: str  # "magpie" | "code" | "tiny"
    group: str  # split unit: the prompt itself, or the stdlib function a coding prompt is about
    response: str  # "greedy" | "sampled"
    input_ids: list[int]
    assistant_start: int  # input_ids[assistant_start:] is the assistant's turn
    finished: bool  # the response ended with an end-of-turn token

    @property
    def prompt_ids(self) -> list[int]:
        """The chat-formatted prompt, generation prompt included (what the engine is given)."""
        return self.input_ids[: self.assistant_start]


def split_groups(groups: list[str], fraction: float, max_heldout: int, seed: int) -> set[str]:
    """The held-out groups: a seeded ``fraction`` of the distinct groups, at most ``max_heldout``.

    >>> sorted(split_groups(["a", "b", "c", "d", "a"], 0.5, 10, seed=0))
    ['b', 'd']
    """
    distinct = sorted(set(groups))
    k = min(round(fraction * len(distinct)), max_heldout)
    return set(random.Random(seed).sample(distinct, k))


def generate_responses(target, prompts: list[tuple[str, str, str, list[int]]], *, temperature: float,
                       max_new_tokens: int, concurrency: int, seed: int, deadline: float | None = None,
                       progress: bool = True, desc: str = "responses") -> list[Example]:
    """Responses of ``target`` to ``(text, source, group, prompt_ids)`` prompts, batched.

    Chunks are formed in length order (less padding) but the examples come back in the
    order of ``prompts``; no new chunk starts after ``deadline`` (those prompts are skipped).
    """
    from tqdm.auto import tqdm

    eos = tuple(target.config.eos_token_ids)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i][3]))
    done: dict[int, Example] = {}
    for n, start in enumerate(tqdm(range(0, len(order), concurrency), desc=desc, disable=not progress)):
        if deadline is not None and time.monotonic() > deadline:
            break
        chunk = order[start:start + concurrency]
        cfg = SpecConfig(method="baseline", temperature=temperature, max_new_tokens=max_new_tokens, seed=seed + n)
        res = SpecDecoder(target, None, cfg).generate([prompts[i][3] for i in chunk], eos_token_ids=eos)
        for i, toks in zip(chunk, res.tokens):
            text, source, group, ids = prompts[i]
            done[i] = Example(text, source, group, "greedy" if temperature == 0 else "sampled", list(ids) + toks,
                              len(ids), bool(toks) and toks[-1] in eos)
    return [done[i] for i in sorted(done)]


def write_split(examples: list[Example], out_dir: Path, split: str, shard_rows: int) -> list[dict]:
    """Write ``examples`` as ``{split}-XXXXX.jsonl`` shards, each atomically; returns their entries."""
    entries = []
    for k, start in enumerate(range(0, len(examples), shard_rows)):
        path = out_dir / f"{split}-{k:05d}.jsonl"
        rows = examples[start:start + shard_rows]
        with atomic_path(path) as tmp:
            tmp.write_text("".join(json.dumps(asdict(e), separators=(",", ":")) + "\n" for e in rows))
        entries.append({"file": path.name, "rows": len(rows), "sha256": sha256_file(path)})
    return entries


def split_stats(examples: list[Example]) -> dict:
    """Counts for the data card: examples, prompts, tokens, assistant tokens, by source/response."""
    return {"examples": len(examples), "prompts": len({e.prompt for e in examples}),
            "tokens": sum(len(e.input_ids) for e in examples),
            "assistant_tokens": sum(len(e.input_ids) - e.assistant_start for e in examples),
            "finished": sum(e.finished for e in examples),
            "by_source": {s: sum(e.source == s for e in examples) for s in sorted({e.source for e in examples})},
            "by_response": {r: sum(e.response == r for e in examples) for r in sorted({e.response for e in examples})}}


def write_dataset(out_dir: Path | str, train: list[Example], heldout: list[Example], card: dict,
                  shard_rows: int = 4096) -> dict:
    """Write both splits and then the card (JSON + Markdown), which marks the folder complete."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (out_dir / "card.json", out_dir / "card.md"):
        stale.unlink(missing_ok=True)
    card = dict(card, format=FORMAT, splits={"train": split_stats(train), "heldout": split_stats(heldout)},
                shards={"train": write_split(train, out_dir, "train", shard_rows),
                        "heldout": write_split(heldout, out_dir, "heldout", shard_rows)})
    with atomic_path(out_dir / "card.md") as tmp:
        tmp.write_text(card_markdown(card))
    write_json(out_dir / "card.json", card)
    return card


def load_split(data_dir: Path | str, split: str = "train", verify: bool = True) -> list[Example]:
    """Read one split of a folder ``synthesize`` wrote.

    Raises:
        ValueError: no (complete) data card, an unknown split, or a shard whose sha256 differs.
    """
    data_dir = Path(data_dir)
    card_file = data_dir / "card.json"
    if not card_file.is_file():
        raise ValueError(f"{data_dir}: no card.json, so not a complete peagle_lab data folder "
                         "(run `peagle-lab train-data` / synthesize first)")
    card = json.loads(card_file.read_text())
    if split not in card.get("shards", {}):
        raise ValueError(f"split={split!r} is not in {data_dir}; it has {sorted(card.get('shards', {}))}")
    out = []
    for entry in card["shards"][split]:
        path = data_dir / entry["file"]
        if verify and sha256_file(path) != entry["sha256"]:
            raise ValueError(f"{path}: sha256 differs from card.json (modified or truncated)")
        out.extend(Example(**json.loads(line)) for line in path.read_text().splitlines() if line)
    return out


def card_markdown(card: dict) -> str:
    """A human-readable data card."""
    lines = [f"# Training data card ({card.get('target', 'unknown target')})", "",
             f"Created {card.get('created', '?')} with peagle_lab on {card.get('device', '?')}, "
             f"Python {card.get('python', '?')}, torch {card.get('torch', '?')}; seed {card.get('seed', '?')}.", "",
             "| split | examples | prompts | tokens | assistant tokens | finished |", "|---|---|---|---|---|---|"]
    for name, s in card.get("splits", {}).items():
        lines.append(f"| {name} | {s['examples']} | {s['prompts']} | {s['tokens']} | {s['assistant_tokens']} "
                     f"| {s['finished']} |")
    src = card.get("sources", {})
    mag, code = src.get("magpie", {}), src.get("code", {})
    lines += ["", "## Sources", "",
              f"- Magpie: {mag.get('sampled', 0)} user turns sampled from the target; "
              f"outcomes {mag.get('outcomes', {})}",
              f"- coding: {code.get('prompts', 0)} prompts from {code.get('functions', 0)} documented functions of "
              f"{len(code.get('modules', []))} standard-library modules ({', '.join(code.get('modules', []))})", ""]
    if card.get("timings_s"):
        lines += ["## Timings (s)", "", "```json", json.dumps(card["timings_s"], indent=2), "```", ""]
    ex = card.get("exclusions", {})
    lines += ["Benchmark and demo prompts were excluded before the split "
              f"({ex.get('size', 0)} texts, {ex.get('hits', 0)} hits).", ""]
    return "\n".join(lines)


def environment() -> dict:
    """Versions and the command line, recorded in every card."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv}


def synthesize(target, tokenizer, cfg: DataConfig, out_dir: Path | str, exclude: Iterable[str] = (),
               target_name: str = "target", progress: bool = True, log=print) -> dict:
    """Make a whole dataset (see the module docstring) and return its card.

    Args:
        target: the target ``LlamaModel`` (its device does the generation).
        tokenizer: the target's tokenizer, with a chat template.
        cfg: sizes, temperatures, seeds, concurrency, time budget.
        out_dir: where shards and the card go.
        exclude: prompt texts that must never be trained on (benchmarks, demos).
    """
    from ..testing import CHAT_PROMPTS

    t0 = time.monotonic()
    deadline = t0 + cfg.time_budget_s if cfg.time_budget_s else None
    excl = Exclusions(list(exclude) + list(CHAT_PROMPTS))
    timings = {}
    magpie, magpie_stats = magpie_prompts(
        target, tokenizer, cfg.num_magpie, temperatures=cfg.magpie_temperatures, max_new_tokens=cfg.magpie_max_tokens,
        concurrency=cfg.concurrency, seed=cfg.seed, filt=PromptFilter(), exclude=excl, deadline=deadline,
        progress=progress)
    timings["magpie"] = time.monotonic() - t0
    functions = stdlib_functions(STDLIB_MODULES)
    code = code_prompts(functions, cfg.code_per_function, cfg.seed, excl)
    code = random.Random(cfg.seed).sample(code, min(len(code), cfg.max_code_prompts))
    log(f"prompts: {len(magpie)} magpie kept of {cfg.num_magpie} ({dict(magpie_stats)}), {len(code)} coding")
    # Both sources already consulted the exclusions; checking the union again keeps that a
    # property of this function rather than of every prompt source someone adds later.
    prompts = [p for p in [(t, "magpie", t) for t in magpie] + [(t, "code", g) for t, g in code] if excl.allows(p[0])]
    # One seeded shuffle fixes every later order, so "the first N held-out prompts" mixes sources.
    prompts = random.Random(cfg.seed).sample(prompts, len(prompts))
    held = split_groups([g for _, _, g in prompts], cfg.heldout_fraction, cfg.heldout_max, cfg.seed)
    encoded = [(t, s, g, encode_chat(tokenizer, t)) for t, s, g in prompts]
    train_p = [p for p in encoded if p[2] not in held]
    held_p = [p for p in encoded if p[2] in held]
    gen = dict(max_new_tokens=cfg.response_max_tokens, concurrency=cfg.concurrency, deadline=deadline,
               progress=progress)
    t1 = time.monotonic()
    heldout = generate_responses(target, held_p, temperature=0.0, seed=cfg.seed, desc="held-out greedy", **gen)
    train = generate_responses(target, train_p, temperature=0.0, seed=cfg.seed, desc="greedy responses", **gen)
    timings["greedy"] = time.monotonic() - t1
    t2 = time.monotonic()
    train += generate_responses(target, train_p, temperature=cfg.sample_temperature, seed=cfg.seed + 10_000,
                                desc="sampled responses", **gen)
    timings["sampled"] = time.monotonic() - t2
    timings["total"] = time.monotonic() - t0
    card = dict(environment(), target=target_name, device=str(target.device), dtype=str(target.dtype),
                seed=cfg.seed, config=asdict(cfg), timings_s=timings,
                stopped_by_time_budget=bool(deadline and time.monotonic() > deadline),
                exclusions={"size": len(excl), "hits": excl.hits},
                sources={"magpie": {"sampled": cfg.num_magpie, "outcomes": dict(magpie_stats)},
                         "code": {"modules": list(STDLIB_MODULES), "functions": len(functions), "prompts": len(code)}},
                heldout_groups=len(held))
    return write_dataset(out_dir, train, heldout, card, cfg.shard_rows)

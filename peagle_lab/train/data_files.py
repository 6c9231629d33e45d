"""The on-disk form of a data folder: ``Example`` rows, JSONL shards per rank, the data card.

A folder holds ``{split}-r{rank:02d}-{k:05d}.jsonl`` shards, each written atomically by the
rank that generated it, and ``card.json`` + ``card.md``, written last by rank 0. The card
lists every shard of every rank with its sha256, so ``load_split`` reads a folder made by
any number of processes, and a folder without a card (a run still going, or killed) is
never read as data. Folders written before shards carried a rank (``train-00000.jsonl``)
load the same way: the card names the files.

What the card says: ``world_size``, ``seed`` and ``config`` (how it was made);
``splits.<split>`` (counts, tallies by source / domain / response, and the greedy shares:
``greedy_share`` of examples, ``greedy_token_share`` of all tokens,
``greedy_assistant_token_share`` of the tokens with a loss); ``sources`` (per-source and
per-Magpie-domain counts); ``responses`` (sampled and two-turn selections, follow-up
outcomes); ``throughput`` (generated tokens, seconds, tokens/s per phase and rank, total).
"""
from __future__ import annotations

import json
import platform
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..models.checkpoints import atomic_path, sha256_file, write_json

FORMAT = "peagle_lab.data/1"
_SHARD = re.compile(r"(train|heldout)(-r\d+)?-\d{5}\.jsonl")


@dataclass(frozen=True)
class Example:
    """One training sequence: a chat conversation and the target's last response, as token ids."""

    prompt: str  # the (first) user turn
    source: str  # "magpie" | "code" | "math" | "writing" | "tiny"
    group: str  # split unit: the prompt itself, the stdlib function or the writing task it is about
    response: str  # "greedy" | "sampled"
    input_ids: list[int]
    assistant_start: int  # input_ids[assistant_start:] is the last assistant turn, the only one with a loss
    finished: bool  # the response ended with an end-of-turn token
    domain: str = ""  # Magpie's system-prompt domain; the source itself for the other sources
    follow_up: str = ""  # the second user turn of a two-turn conversation ("" for one turn)

    @property
    def prompt_ids(self) -> list[int]:
        """The chat-formatted conversation, generation prompt included (what the engine is given)."""
        return self.input_ids[: self.assistant_start]


def write_split(examples: list[Example], out_dir: Path, split: str, shard_rows: int, rank: int = 0) -> list[dict]:
    """Write ``examples`` as ``{split}-r{rank:02d}-XXXXX.jsonl`` shards, each atomically; returns their entries."""
    entries = []
    for k, start in enumerate(range(0, len(examples), shard_rows)):
        path = out_dir / f"{split}-r{rank:02d}-{k:05d}.jsonl"
        rows = examples[start:start + shard_rows]
        with atomic_path(path) as tmp:
            tmp.write_text("".join(json.dumps(asdict(e), separators=(",", ":")) + "\n" for e in rows))
        entries.append({"file": path.name, "rows": len(rows), "sha256": sha256_file(path), "rank": rank})
    return entries


def clear_folder(out_dir: Path) -> None:
    """Create ``out_dir``, removing an earlier run's card and shards (and only those)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (out_dir / "card.json", out_dir / "card.md"):
        stale.unlink(missing_ok=True)
    for f in out_dir.glob("*.jsonl"):
        if _SHARD.fullmatch(f.name):
            f.unlink()


_COUNTS = ("examples", "prompts", "tokens", "assistant_tokens", "finished", "multi_turn")
_TALLIES = ("by_source", "by_domain", "by_response", "tokens_by_response", "assistant_tokens_by_response")


def _with_shares(s: dict) -> dict:
    """``s`` plus the greedy shares (of examples, of all tokens, of assistant tokens: the loss tokens)."""
    def share(tally: str, total: str) -> float:
        return s[tally].get("greedy", 0) / s[total] if s[total] else 0.0
    return dict(s, greedy_share=share("by_response", "examples"),
                greedy_token_share=share("tokens_by_response", "tokens"),
                greedy_assistant_token_share=share("assistant_tokens_by_response", "assistant_tokens"))


def split_stats(examples: list[Example]) -> dict:
    """Counts for the data card: examples, prompts, tokens, assistant tokens, tallies, greedy shares.

    ``prompts`` counts distinct first user turns; ``multi_turn`` the two-turn examples.
    """
    s = {"examples": len(examples), "prompts": len({e.prompt for e in examples}),
         "tokens": sum(len(e.input_ids) for e in examples),
         "assistant_tokens": sum(len(e.input_ids) - e.assistant_start for e in examples),
         "finished": sum(e.finished for e in examples), "multi_turn": sum(bool(e.follow_up) for e in examples)}
    tallies = {k: Counter() for k in _TALLIES}
    for e in examples:
        tallies["by_source"][e.source] += 1
        tallies["by_domain"][e.domain] += 1
        tallies["by_response"][e.response] += 1
        tallies["tokens_by_response"][e.response] += len(e.input_ids)
        tallies["assistant_tokens_by_response"][e.response] += len(e.input_ids) - e.assistant_start
    return _with_shares(dict(s, **{k: dict(sorted(c.items())) for k, c in tallies.items()}))


def drop_domains(examples: list[Example], domains) -> tuple[list[Example], dict[str, int]]:
    """``examples`` without those of ``domains`` (a data ablation), and how many each named domain held.

    An example's domain is its Magpie domain, else its source (``code``, ``math``, ``writing``). A domain
    the examples do not have is an error, so a misspelt name cannot leave the data whole unnoticed.

    >>> ex = [Example("p", "magpie", "g", "greedy", [1, 2], 1, True, "openings"),
    ...       Example("q", "code", "h", "greedy", [3, 4], 1, True, "code")]
    >>> kept, dropped = drop_domains(ex, ["openings"])
    >>> [e.prompt for e in kept], dropped
    (['q'], {'openings': 1})
    """
    have = Counter(e.domain or e.source for e in examples)
    unknown = [d for d in domains if d not in have]
    if unknown:
        raise ValueError(f"exclude domains {unknown}: the training data has no such domain; "
                         f"it has {', '.join(sorted(have))}")
    drop = set(domains)
    kept = [e for e in examples if (e.domain or e.source) not in drop]
    if not kept:
        raise ValueError(f"excluding {sorted(drop)} leaves no training examples")
    return kept, {d: have[d] for d in dict.fromkeys(domains)}


def merge_split_stats(parts: list[dict]) -> dict:
    """One ``split_stats`` from the ranks' own (ranks hold disjoint prompts, so counts add up).

    >>> a = split_stats([Example("p", "code", "g", "greedy", [1, 2, 3], 1, True)])
    >>> b = split_stats([Example("q", "code", "h", "sampled", [1, 2], 1, True)])
    >>> m = merge_split_stats([a, b])
    >>> m["examples"], m["by_response"], round(m["greedy_token_share"], 2)
    (2, {'greedy': 1, 'sampled': 1}, 0.6)
    """
    out = {k: sum(p[k] for p in parts) for k in _COUNTS}
    for k in _TALLIES:
        c = Counter()
        for p in parts:
            c.update(p[k])
        out[k] = dict(sorted(c.items()))
    return _with_shares(out)


def load_split(data_dir: Path | str, split: str = "train", verify: bool = True) -> list[Example]:
    """Read one split of a folder ``synthesize`` wrote (every rank's shards, in card order).

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


def environment() -> dict:
    """Versions and the command line, recorded in every card."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv}


def throughput_section(reports: list[dict]) -> dict:
    """The card's throughput section: generated tokens, seconds and tokens/s per phase and rank.

    Over ranks, a phase's seconds are the slowest rank's (ranks run side by side), and the
    total divides every rank's tokens by the slowest rank's wall time.
    """
    per_rank, phases = [], {}
    for r in reports:
        tokens = sum(p["tokens"] for p in r["phases"].values())
        per_rank.append({"rank": r["rank"], "device": r["device"], "phases": r["phases"], "tokens": tokens,
                         "seconds": r["seconds"], "tokens_per_s": tokens / r["seconds"] if r["seconds"] else 0.0})
        for name, p in r["phases"].items():
            agg = phases.setdefault(name, {"requests": 0, "done": 0, "tokens": 0, "seconds": 0.0})
            for k in ("requests", "done", "tokens"):
                agg[k] += p[k]
            agg["seconds"] = max(agg["seconds"], p["seconds"])  # ranks run side by side
    for agg in phases.values():
        agg["tokens_per_s"] = agg["tokens"] / agg["seconds"] if agg["seconds"] else 0.0
    tokens, wall = sum(r["tokens"] for r in per_rank), max(r["seconds"] for r in per_rank)
    return {"per_rank": per_rank, "phases": phases,
            "total": {"tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall if wall else 0.0}}


def _engine_cells(e: dict | None) -> str:
    """A phase's engine split as card.md cells (cards written before it was recorded: dashes)."""
    if not e or not e.get("steps"):
        return " | ".join(["—"] * 6)
    step = "—" if e.get("step_ms") is None else f"{e['step_ms']:.2f}"
    busy = "—" if e.get("row_use") is None else f"{100 * e['row_use']:.0f} %"
    return f"{e['prefill_s']:.1f} | {e['decode_s']:.1f} | {e['warmup_s']:.1f} | {e['other_s']:.1f} | {step} | {busy}"


def write_card(out_dir: Path, card: dict) -> None:
    """The Markdown card, then ``card.json``: the file that marks the folder complete."""
    with atomic_path(out_dir / "card.md") as tmp:
        tmp.write_text(card_markdown(card))
    write_json(out_dir / "card.json", card)


def card_markdown(card: dict) -> str:
    """A human-readable data card."""
    lines = [f"# Training data card ({card.get('target', 'unknown target')})", "",
             f"Created {card.get('created', '?')} with peagle_lab on {card.get('device', '?')} × "
             f"{card.get('world_size', 1)} process(es), Python {card.get('python', '?')}, torch "
             f"{card.get('torch', '?')}; seed {card.get('seed', '?')}.", "",
             "| split | examples | prompts | tokens | assistant tokens | finished | two-turn | greedy share "
             "(examples / tokens) |", "|---|---|---|---|---|---|---|---|"]
    for name, s in card.get("splits", {}).items():
        lines.append(f"| {name} | {s['examples']} | {s['prompts']} | {s['tokens']} | {s['assistant_tokens']} "
                     f"| {s['finished']} | {s.get('multi_turn', 0)} | {s.get('greedy_share', 1.0):.2f} / "
                     f"{s.get('greedy_token_share', 1.0):.2f} |")
    src, resp = card.get("sources", {}), card.get("responses", {})
    mag, code = src.get("magpie", {}), src.get("code", {})
    lines += ["", "## Sources", "",
              f"- Magpie: {mag.get('sampled', 0)} user turns sampled from the target under "
              f"{len(mag.get('domains', {}))} system prompts; kept per domain {mag.get('kept_by_domain', {})}; "
              f"outcomes {mag.get('outcomes', {})}",
              f"- coding: {code.get('prompts', 0)} prompts from {code.get('functions', 0)} documented functions of "
              f"{len(code.get('modules', []))} standard-library modules ({', '.join(code.get('modules', []))})",
              f"- math: {src.get('math', {}).get('prompts', 0)} templated questions; writing: "
              f"{src.get('writing', {}).get('prompts', 0)} templated tasks",
              "", "## Responses", "",
              "Every prompt has a greedy response; a seeded "
              f"{resp.get('sampled_fraction', 0):.0%} of training prompts ({resp.get('sampled_prompts', 0)}) also a "
              f"sampled one (T={resp.get('sample_temperature', '?')}). {resp.get('multi_turn_prompts', 0)} training "
              "prompts were picked for a second turn: where the first reply finished, Magpie wrote a follow-up user "
              f"turn (outcomes {resp.get('follow_ups', {})}) and the target a greedy reply, the only turn with a "
              f"loss ({card.get('splits', {}).get('train', {}).get('multi_turn', 0)} two-turn examples).", ""]
    tp = card.get("throughput", {})
    if tp:
        lines += ["## Throughput (generated tokens / s)", "",
                  "Where the time went: the decoder's prefill and decode seconds (decode includes the warm-up: "
                  "CUDA-graph capture and first compilation), the rest of the phase (outside the decoder's timers: "
                  "tokenising, filtering, building decoders and caches), the decode step without "
                  "warm-up, and how busy the rows were (decoded tokens over row-steps held by a request: with "
                  "continuous batching a finished row waits only for the next host read and refill).", "",
                  "| rank | phase | requests | done | tokens | s | tok/s | prefill s | decode s | warm-up s | other s "
                  "| ms/step | rows busy |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in tp.get("per_rank", []):
            for phase, p in r["phases"].items():
                lines.append(f"| {r['rank']} | {phase} | {p['requests']} | {p['done']} | {p['tokens']} "
                             f"| {p['seconds']:.1f} | {p['tokens_per_s']:.0f} | {_engine_cells(p.get('engine'))} |")
        t = tp.get("total", {})
        lines += ["", f"Total: {t.get('tokens', 0)} tokens in {t.get('seconds', 0):.1f} s, "
                      f"{t.get('tokens_per_s', 0):.0f} tokens/s.", ""]
    ex = card.get("exclusions", {})
    lines += ["Benchmark and demo prompts were excluded before the split "
              f"({ex.get('size', 0)} texts, {ex.get('hits', 0)} hits).", ""]
    return "\n".join(lines)

"""Offline training data: prompts → the target's responses → sharded JSONL + a data card, on 1..N processes.

The paper regenerates every response with the target itself, so the drafter learns the
target's own continuations. ``synthesize`` does the same with ``StreamDecoder`` (continuous
batching: a finished request's row takes the next prompt at once):

1. prompts: Magpie user turns sampled from the target under domain system prompts (each
   rank samples its share, then all are gathered and deduplicated); coding prompts from
   standard-library signatures; templated math and writing prompts. Every prompt passes
   ``Exclusions``.
2. a held-out split *by prompt group* (all prompts about one stdlib function or one writing
   task fall on one side), the same on every rank, so held-out acceptance measures prompts
   the drafter never saw;
3. each rank takes its shard of the prompts and generates, in this order so that a token
   target or a time budget cuts the least useful work last: held-out greedy responses; a
   greedy response for every training prompt (we evaluate greedily, so most data must be
   greedy); for a seeded ``multi_turn_fraction`` of them a follow-up user turn (Magpie after
   the conversation) and a greedy second response, with the loss on that last turn only;
   for a seeded ``sampled_fraction`` a sampled response (more varied continuations);
4. each rank writes its own shards; rank 0 writes the card last (``data_files``).

Under ``torchrun`` every process runs ``synthesize``; rank and world come from the process
group, and without one it is a world of one. For a seed and world size the rows are the same
on every run on a CPU; on CUDA in bfloat16 a few generated continuations can part ways between
runs (near-tied logits under the engine's batched kernels: 3 greedy rows of 1,900 on an H200).
"""
from __future__ import annotations

import math
import random
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, NamedTuple

from ..chat import encode_chat
from ..config import check_int
from .data_files import (  # noqa: F401  (load_split is re-exported: train.data is its public home)
    FORMAT, Example, clear_folder, drop_domains, environment, load_split, merge_split_stats, split_stats,
    throughput_section, write_card, write_split,
)
from .dist import all_gather_objects, barrier, rank_and_world, shard
from .prompts import (
    MAGPIE_DOMAINS, STDLIB_MODULES, Budget, Deduper, Exclusions, PromptFilter, code_prompts, decode_all, derive_seed,
    follow_up_turns, join_turn, magpie_prompts, normalize_prompt, stdlib_functions, turn_joints,
)
from .prompts_pool import RequestOpenings, load_request_pool
from .prompts_synthetic import math_prompts, writing_prompts


@dataclass(frozen=True)
class DataConfig:
    """How much data ``synthesize`` makes and how (every field lands in the data card)."""

    num_magpie: int = 6144  # user turns sampled over all ranks (before filtering and deduplication)
    magpie_temperatures: tuple[float, ...] = (0.7, 0.9, 1.0)  # cycled over the sampled prompts
    magpie_max_tokens: int = 64  # a user turn longer than this is dropped as unfinished
    # weight of the "openings" Magpie domain (user turns begun with a hand-written request's first
    # words, prompts_pool), beside MAGPIE_DOMAINS' 13; 0 leaves it out
    opening_weight: int = 0
    code_per_function: int = 2  # coding prompts per stdlib function (different templates)
    max_code_prompts: int = 1024
    max_math_prompts: int = 1024
    max_writing_prompts: int = 1024
    response_max_tokens: int = 256
    sample_temperature: float = 0.8
    sampled_fraction: float = 0.25  # training prompts that also get a sampled response (all get a greedy one)
    multi_turn_fraction: float = 0.15  # training prompts continued by a follow-up turn and a second response
    heldout_fraction: float = 0.04
    heldout_max: int = 256  # prompt groups held out at most
    concurrency: int = 256  # requests the engine decodes together
    shard_rows: int = 4096
    seed: int = 0
    time_budget_s: float | None = None  # admit no prompt after this long
    # Tokens to generate after the prompts are fixed (responses, follow-up turns), over all ranks;
    # each rank admits no prompt once it made its share (Magpie's prompt sampling is not counted).
    target_tokens: int | None = None

    def magpie_domains(self) -> tuple:
        """``MAGPIE_DOMAINS``, plus the openings domain when ``opening_weight`` > 0."""
        if not self.opening_weight:
            return MAGPIE_DOMAINS
        return MAGPIE_DOMAINS + (("openings", RequestOpenings(load_request_pool()), self.opening_weight),)

    def __post_init__(self) -> None:
        check_int("num_magpie", self.num_magpie, 0)
        check_int("magpie_max_tokens", self.magpie_max_tokens, 4, 1024)
        check_int("opening_weight", self.opening_weight, 0, 1000)
        check_int("code_per_function", self.code_per_function, 0, 5)
        for name in ("max_code_prompts", "max_math_prompts", "max_writing_prompts", "heldout_max", "seed"):
            check_int(name, getattr(self, name), 0)
        check_int("response_max_tokens", self.response_max_tokens, 1, 4096)
        check_int("concurrency", self.concurrency, 1, 8192)
        check_int("shard_rows", self.shard_rows, 1)
        if self.target_tokens is not None:
            check_int("target_tokens", self.target_tokens, 1)
        if not self.magpie_temperatures or any(not 0.0 < t <= 2.0 for t in self.magpie_temperatures):
            raise ValueError(f"magpie_temperatures={self.magpie_temperatures} must be non-empty, each in (0, 2]")
        if not 0.0 < self.sample_temperature <= 2.0:
            raise ValueError(f"sample_temperature={self.sample_temperature} is out of range; expected (0, 2]")
        for name in ("sampled_fraction", "multi_turn_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)} is out of range; expected [0, 1]")
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction={self.heldout_fraction} is out of range; expected [0, 1)")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s={self.time_budget_s} must be > 0 (or None for no budget)")


class Prompt(NamedTuple):
    """What the engine answers: a chat-formatted conversation and what its example records."""

    text: str
    source: str
    group: str
    ids: list[int]
    domain: str = ""
    follow_up: str = ""


def split_groups(groups: list[str], fraction: float, max_heldout: int, seed: int) -> set[str]:
    """The held-out groups: a seeded ``fraction`` of the distinct groups, at most ``max_heldout``.

    >>> sorted(split_groups(["a", "b", "c", "d", "a"], 0.5, 10, seed=0))
    ['b', 'd']
    """
    distinct = sorted(set(groups))
    k = min(round(fraction * len(distinct)), max_heldout)
    return set(random.Random(seed).sample(distinct, k))


def generate_responses(target, prompts: list[tuple], *, temperature: float, max_new_tokens: int, concurrency: int,
                       seed: int, budget: Budget | None = None, progress: bool = True,
                       desc: str = "responses") -> list[Example]:
    """Responses of ``target`` to ``prompts``, ``concurrency`` at a time with continuous batching.

    One ``StreamDecoder`` run (``prompts.decode_all``): a finished request's row takes the next
    prompt, shortest prompts first; sampling uses the seed ``seed``.

    Args:
        prompts: ``Prompt`` tuples, or plain ``(text, source, group, ids)``.
        temperature: 0 for greedy responses, else sampled ones.
        budget: no prompt starts once it is exhausted (those prompts are skipped); the
            generated tokens are added to it.

    Returns:
        The examples of the prompts answered, in the order of ``prompts``.
    """
    prompts = [Prompt(*p) for p in prompts]
    eos = tuple(target.config.eos_token_ids)
    outs = decode_all(target, [p.ids for p in prompts], temperature=temperature, max_new_tokens=max_new_tokens,
                      concurrency=concurrency, seed=seed, budget=budget, progress=progress, desc=desc)
    kind = "greedy" if temperature == 0 else "sampled"
    return [Example(p.text, p.source, p.group, kind, list(p.ids) + toks, len(p.ids), bool(toks) and toks[-1] in eos,
                    p.domain, p.follow_up) for p, toks in zip(prompts, outs) if toks is not None]


class _Phases:
    """Requests, generated tokens and seconds of each phase on this rank: the card's throughput."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    @contextmanager
    def __call__(self, name: str, budget: Budget, requests: int):
        t, tokens, engine = time.monotonic(), budget.tokens, dict(budget.engine)
        row = {"requests": requests, "done": 0}
        yield row  # the phase sets row["done"]
        seconds, made = time.monotonic() - t, budget.tokens - tokens
        spent = {k: budget.engine[k] - engine[k] for k in engine}
        # the rest of the phase: outside the engine's timers (tokenising, filtering, building
        # engines and KV caches)
        spent["other_s"] = seconds - spent["prefill_s"] - spent["decode_s"]
        spent["row_use"] = spent["decode_tokens"] / spent["row_steps"] if spent["row_steps"] else None
        # a decode step, warm-up (graph capture, compilation: inside the decode timer) excluded
        spent["step_ms"] = 1e3 * (spent["decode_s"] - spent["warmup_s"]) / spent["steps"] if spent["steps"] else None
        self.rows[name] = dict(row, tokens=made, seconds=seconds, tokens_per_s=made / seconds if seconds > 0 else 0.0,
                               engine=spent)


def _pool_prompts(gathered: list, cfg: DataConfig, excl: Exclusions) -> tuple[list[tuple], dict]:
    """Every rank's Magpie turns plus the templated sources → one deduplicated, excluded, shuffled list.

    Runs identically on every rank (same inputs, seeded), so all ranks agree on the prompts
    and the split without another exchange.

    Returns:
        ``([(text, source, group, domain)], sources)``; ``sources`` is the card's section.
    """
    dedup, magpie = Deduper(), []
    domains = cfg.magpie_domains()
    by_domain: dict[str, Counter] = {name: Counter() for name, _, _ in domains}
    for kept, stats in gathered:  # rank order: deterministic
        for domain, c in stats.items():
            by_domain.setdefault(domain, Counter()).update(c)
        for text, domain in kept:
            if dedup.add(text):  # each rank deduplicated its own; this catches repeats across ranks
                magpie.append((text, "magpie", text, domain))
            else:
                by_domain[domain]["kept"] -= 1
                by_domain[domain]["duplicate"] += 1
    functions = stdlib_functions(STDLIB_MODULES)
    code = code_prompts(functions, cfg.code_per_function, cfg.seed, excl)
    code = random.Random(cfg.seed).sample(code, min(len(code), cfg.max_code_prompts))
    maths = math_prompts(cfg.max_math_prompts, derive_seed(cfg.seed, "math"), excl)
    writing = writing_prompts(cfg.max_writing_prompts, derive_seed(cfg.seed, "writing"), excl)
    pool = magpie + [(t, "code", g, "code") for t, g in code] + [(t, "math", g, "math") for t, g in maths] \
        + [(t, "writing", g, "writing") for t, g in writing]
    # Every source already consulted the exclusions; checking the union again keeps that a
    # property of this function rather than of every prompt source someone adds later.
    seen, prompts = set(), []
    for p in pool:
        if excl.allows(p[0]) and normalize_prompt(p[0]) not in seen:
            seen.add(normalize_prompt(p[0]))
            prompts.append(p)
    # One seeded shuffle fixes every later order, so "the first N held-out prompts" mixes sources.
    prompts = random.Random(cfg.seed).sample(prompts, len(prompts))
    kept_by = Counter(p[1] for p in prompts)
    sources = {
        "magpie": {"sampled": cfg.num_magpie, "domains": {n: s if s is None else str(s) for n, s, _ in domains},
                   "by_domain": {d: dict(sorted(c.items())) for d, c in by_domain.items()},
                   "outcomes": dict(sorted(sum(by_domain.values(), Counter()).items())),
                   "kept_by_domain": dict(Counter(p[3] for p in prompts if p[1] == "magpie")),
                   "prompts": kept_by["magpie"]},
        "code": {"modules": list(STDLIB_MODULES), "functions": len(functions), "prompts": kept_by["code"]},
        "math": {"prompts": kept_by["math"]}, "writing": {"prompts": kept_by["writing"]}}
    return prompts, sources


def _second_turns(target, tokenizer, firsts: list[Example], cfg: DataConfig, excl: Exclusions, budget: Budget,
                  phases: _Phases, rank: int, progress: bool) -> tuple[list[Example], Counter]:
    """Two-turn examples: a first exchange, a follow-up the target writes as the user, the greedy reply.

    The conversation keeps the first reply's generated tokens, so its ids start with the
    single-turn example's; only the second reply carries a loss (the first is trained by
    that single-turn example already).
    """
    to_user, to_assistant = turn_joints(tokenizer)
    firsts = [e for e in firsts if e.finished]  # a reply cut off mid-way is no conversation to continue
    convs = [join_turn(e.input_ids, to_user) for e in firsts]
    with phases("follow_up", budget, len(convs)) as row:
        turns, stats = follow_up_turns(target, tokenizer, convs, temperatures=cfg.magpie_temperatures,
                                       max_new_tokens=cfg.magpie_max_tokens, concurrency=cfg.concurrency,
                                       seed=derive_seed(cfg.seed, "follow_up", rank), exclude=excl, budget=budget,
                                       progress=progress)
        row["done"] = len(convs) - stats["skipped_budget"]
    second = []
    for e, conv, text in zip(firsts, convs, turns):
        if text:  # kept: close the user's turn and open the assistant's, as the template does
            ids = join_turn(conv + list(tokenizer(text, add_special_tokens=False)["input_ids"]), to_assistant)
            second.append(Prompt(e.prompt, e.source, e.group, ids, e.domain, text))
    with phases("multi_turn", budget, len(second)) as row:
        out = generate_responses(target, second, temperature=0.0, max_new_tokens=cfg.response_max_tokens,
                                 concurrency=cfg.concurrency, seed=0, budget=budget, progress=progress,
                                 desc="second responses")
        row["done"] = len(out)
    return out, stats


def _response_plan(train_p: list[tuple], cfg: DataConfig) -> tuple[set[int], set]:
    """Which training prompts also get a sampled response (indices), and which a second turn (texts)."""
    n = len(train_p)
    sampled = set(random.Random(derive_seed(cfg.seed, "sampled")).sample(range(n), round(cfg.sampled_fraction * n)))
    multi = {train_p[i][0] for i in random.Random(derive_seed(cfg.seed, "multi_turn")).sample(
        range(n), round(cfg.multi_turn_fraction * n))}
    return sampled, multi


def _card(target, target_name: str, cfg: DataConfig, reports: list[dict], sources: dict, *, exclusions: dict,
          heldout_groups: int, sampled_prompts: int, multi_turn_prompts: int) -> dict:
    """The data card from every rank's report: splits, shards, throughput, exclusions, config."""
    follow_ups = sum((Counter(r["follow_ups"]) for r in reports), Counter())
    throughput = throughput_section(reports)
    return dict(
        environment(), format=FORMAT, target=target_name, device=str(target.device), dtype=str(target.dtype),
        world_size=len(reports), seed=cfg.seed, config=asdict(cfg), throughput=throughput,
        timings_s=dict({k: p["seconds"] for k, p in throughput["phases"].items()},
                       total=throughput["total"]["seconds"]),
        stopped_by_time_budget=any("time_budget" in r["stopped_by"] for r in reports),
        stopped_by_token_target=any("token_target" in r["stopped_by"] for r in reports),
        exclusions={"size": exclusions["size"], "hits": exclusions["hits"] + follow_ups["excluded"]},
        sources=sources, heldout_groups=heldout_groups,
        responses={"sampled_fraction": cfg.sampled_fraction, "sample_temperature": cfg.sample_temperature,
                   "sampled_prompts": sampled_prompts, "multi_turn_fraction": cfg.multi_turn_fraction,
                   "multi_turn_prompts": multi_turn_prompts, "follow_ups": dict(sorted(follow_ups.items()))},
        splits={s: merge_split_stats([r["splits"][s] for r in reports]) for s in ("train", "heldout")},
        shards={s: [e for r in reports for e in r["shards"][s]] for s in ("train", "heldout")})


def synthesize(target, tokenizer, cfg: DataConfig, out_dir: Path | str, exclude: Iterable[str] = (),
               target_name: str = "target", progress: bool = True, log=print) -> dict:
    """Make a whole dataset (see the module docstring) and return its card.

    Under torchrun every rank calls this with the same arguments; each writes its own
    shards, rank 0 logs and writes the card, and no rank returns before the card exists.

    Args:
        target: the target ``LlamaModel`` (its device does this rank's generation).
        tokenizer: the target's tokenizer, with a chat template.
        cfg: sizes, fractions, temperatures, seeds, concurrency, time budget, token target.
        out_dir: where shards and the card go (an earlier run's shards and card are removed).
        exclude: prompt texts that must never be trained on (benchmarks, demos).
        target_name: how the card names the target.
        progress: tqdm bars; log: where rank 0's progress lines go.

    Returns:
        The card (the same splits, shards and throughput on every rank).

    Raises:
        ValueError: a chat template that does not render messages verbatim.
    """
    from ..testing import CHAT_PROMPTS

    rank, world = rank_and_world()
    out_dir, t0 = Path(out_dir), time.monotonic()
    log = log if rank == 0 else (lambda *_: None)
    if rank == 0:
        clear_folder(out_dir)  # before the first exchange below, so no rank has written a shard yet
    deadline = t0 + cfg.time_budget_s if cfg.time_budget_s else None
    excl = Exclusions(list(exclude) + list(CHAT_PROMPTS))
    phases, magpie_budget = _Phases(), Budget(deadline)
    n_magpie = len(range(rank, cfg.num_magpie, world))
    with phases("magpie", magpie_budget, n_magpie) as row:
        kept, stats = magpie_prompts(
            target, tokenizer, n_magpie, domains=cfg.magpie_domains(), temperatures=cfg.magpie_temperatures,
            max_new_tokens=cfg.magpie_max_tokens, concurrency=cfg.concurrency, seed=derive_seed(cfg.seed, "magpie", rank),
            filt=PromptFilter(), exclude=excl, budget=magpie_budget, progress=progress)
        row["done"] = n_magpie - sum(c["skipped_budget"] for c in stats.values())
    hits = excl.hits
    prompts, sources = _pool_prompts(all_gather_objects((kept, stats)), cfg, excl)
    shared_hits = excl.hits - hits  # the same on every rank: count it once
    held = split_groups([p[2] for p in prompts], cfg.heldout_fraction, cfg.heldout_max, cfg.seed)
    train_p, held_p = [p for p in prompts if p[2] not in held], [p for p in prompts if p[2] in held]
    n = len(train_p)
    sampled, multi = _response_plan(train_p, cfg)
    log(f"prompts: {sources['magpie']['prompts']} magpie of {cfg.num_magpie} sampled, {sources['code']['prompts']} "
        f"coding, {sources['math']['prompts']} math, {sources['writing']['prompts']} writing; {len(held_p)} held out; "
        f"{len(sampled)} also sampled, {len(multi)} picked for a second turn; {world} rank(s)")

    def encode(p: tuple) -> Prompt:
        return Prompt(p[0], p[1], p[2], encode_chat(tokenizer, p[0]), p[3])

    mine = [(i, encode(train_p[i])) for i in shard(range(n), rank, world)]
    budget = Budget(deadline, math.ceil(cfg.target_tokens / world) if cfg.target_tokens else None)
    gen = dict(max_new_tokens=cfg.response_max_tokens, concurrency=cfg.concurrency, budget=budget, progress=progress)
    my_held = [encode(p) for p in shard(held_p, rank, world)]
    with phases("heldout", budget, len(my_held)) as row:
        heldout = generate_responses(target, my_held, temperature=0.0, seed=0, desc="held-out greedy", **gen)
        row["done"] = len(heldout)
    with phases("greedy", budget, len(mine)) as row:
        greedy = generate_responses(target, [p for _, p in mine], temperature=0.0, seed=0, desc="greedy responses",
                                    **gen)
        row["done"] = len(greedy)
    two_turn, follow_stats = _second_turns(target, tokenizer, [e for e in greedy if e.prompt in multi], cfg, excl,
                                           budget, phases, rank, progress)
    pick = [p for i, p in mine if i in sampled]
    with phases("sampled", budget, len(pick)) as row:
        resampled = generate_responses(target, pick, temperature=cfg.sample_temperature,
                                       seed=derive_seed(cfg.seed, "sampled", rank), desc="sampled responses", **gen)
        row["done"] = len(resampled)
    train = greedy + two_turn + resampled
    report = {"rank": rank, "device": str(target.device), "seconds": time.monotonic() - t0, "phases": phases.rows,
              "shards": {"train": write_split(train, out_dir, "train", cfg.shard_rows, rank),
                         "heldout": write_split(heldout, out_dir, "heldout", cfg.shard_rows, rank)},
              "splits": {"train": split_stats(train), "heldout": split_stats(heldout)},
              "follow_ups": follow_stats, "stopped_by": {magpie_budget.stopped_by, budget.stopped_by}}
    reports = all_gather_objects(report)  # returns once every rank's shards are on disk
    card = _card(target, target_name, cfg, reports, sources,
                 exclusions={"size": len(excl), "hits": sources["magpie"]["outcomes"].get("excluded", 0) + shared_hits},
                 heldout_groups=len(held), sampled_prompts=len(sampled), multi_turn_prompts=len(multi))
    if rank == 0:
        write_card(out_dir, card)
    barrier()  # the folder is complete before any rank returns (a caller may read it next)
    return card

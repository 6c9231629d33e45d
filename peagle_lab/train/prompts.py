"""Training prompts without a hub: Magpie-style chat turns and standard-library coding tasks.

* **Magpie** (Xu et al. 2024): give an aligned chat model only the template's prefix up to
  the start of a user turn (``…<|im_start|>user\\n``) and sample; it writes a plausible user
  request, ending it with its end-of-turn token. Samples are filtered (complete, length,
  mostly-ASCII prose, not repetitive, no template markers) and deduplicated. Domain system
  prompts (``MAGPIE_DOMAINS``: a math tutor, a writing coach, …) steer what users ask; after
  a whole conversation the same trick gives a follow-up turn (``follow_up_turns``).
* **Coding prompts** are built from the signatures and docstrings of public functions in a
  fixed list of Python standard-library modules (``inspect``), phrased by a few templates
  (templated math and writing prompts: ``prompts_synthetic``).

Every prompt passes ``Exclusions`` first, so benchmark prompts (HumanEval, the bench
workloads, the demo prompts) never become training data. All sources are deterministic
for a seed (Magpie given the same device and dtype; docstrings vary across Python versions,
which the data card records).
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..stream import StreamDecoder, StreamStats
from .prompts_pool import RequestOpenings

# Pure-Python, documented, and about things people ask assistants to code.
STDLIB_MODULES = (
    "base64", "calendar", "difflib", "email.utils", "fnmatch", "functools", "glob", "gzip", "heapq",
    "html", "ipaddress", "json", "math", "cmath", "posixpath", "pprint", "random", "re", "secrets", "shlex",
    "shutil", "statistics", "tempfile", "textwrap", "urllib.parse", "uuid", "zlib", "binascii", "dataclasses",
    "fileinput", "linecache", "mimetypes", "quopri", "string", "tarfile", "traceback", "unicodedata",
)
CODE_TEMPLATES = (
    "Write a Python function `{name}{sig}`. {summary}",
    "Implement `{name}{sig}` in plain Python without importing `{module}`. Its documentation says: \"{summary}\"",
    "Explain what `{module}.{name}` does and show a short example of calling it.",
    "I need a Python function called `{name}` that does this: {summary} Please add type hints and a docstring.",
    "Write pytest unit tests for `{module}.{name}{sig}`, which is documented as: \"{summary}\"",
)
# (domain, system prompt, weight): Magpie's user turns follow the system prompt they are sampled
# under. None keeps the template's own default, the prompt every response is generated and
# evaluated with; the others only steer what the sampled users ask about.
MAGPIE_DOMAINS = (
    ("general", None, 3),
    ("math", "You are a patient math tutor. Students bring you arithmetic, algebra, geometry and word problems "
             "and want clear, step-by-step explanations.", 1),
    ("writing", "You are a writing coach. People ask you to draft, edit and improve emails, essays, stories, "
                "poems and cover letters.", 1),
    ("code", "You are a programming helper. Users ask you to write, explain, review and debug code, mostly in "
             "Python.", 1),
    ("science", "You are a science teacher who explains physics, chemistry, biology and astronomy in plain "
                "language.", 1),
    ("everyday", "You are a practical assistant for everyday life: cooking, travel, health, money, home and "
                 "planning.", 1),
    # on the chat workload the shipped P-EAGLE head accepts least on
    # explanatory prose about history, society and technology (AL at K = 8: humanities 2.08, STEM 2.28, the
    # other six categories 2.66-3.55; scripts/bench/workload_categories.py, docs/training.md), topics the
    # domains above barely steer users towards
    ("humanities", "You are a humanities tutor. People ask about history, philosophy, literature, art, economics, "
                   "law and society, and want well-organised explanations.", 1),
    ("technology", "You are an engineer who explains technology: computers, networks, energy, machines, medicine "
                   "and how things are built and work.", 1),
    ("reasoning", "You are a careful problem solver. People bring you logic puzzles, riddles, estimates and "
                  "questions that need step-by-step reasoning.", 1),
    ("roleplay", "You are an improvisation partner. Users ask you to play a character, imagine a scenario or "
                 "answer in a role.", 1),
    ("extraction", "You are a data assistant. Users paste a short text and ask you to pull out facts, summarise "
                   "it, classify it or turn it into a list, a table or JSON.", 1),
)


def normalize_prompt(text: str) -> str:
    """The form prompts are compared in: case-folded, whitespace collapsed.

    >>> normalize_prompt("  What is\\n the  Capital of France? ")
    'what is the capital of france?'
    """
    return " ".join(text.split()).casefold()


class Exclusions:
    """Prompt texts that must never be trained on (compared after ``normalize_prompt``)."""

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._keys = {normalize_prompt(t) for t in texts if t and t.strip()}
        self.hits = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, text: str) -> bool:
        return normalize_prompt(text) in self._keys

    def allows(self, text: str) -> bool:
        """False (and counted) for an excluded prompt."""
        if text in self:
            self.hits += 1
            return False
        return True


@dataclass(frozen=True)
class PromptFilter:
    """What a synthesised user turn must look like to be kept."""

    min_chars: int = 16
    max_chars: int = 600
    min_words: int = 4
    min_ascii: float = 0.97  # share of ASCII characters: SmolLM2 is an English model
    min_letters: float = 0.6  # share of letters among non-space characters: prose, not symbol soup
    min_unique_words: float = 0.4  # distinct / total words, for prompts of 12+ words

    def __post_init__(self) -> None:
        if not 1 <= self.min_chars <= self.max_chars:
            raise ValueError(f"min_chars={self.min_chars}, max_chars={self.max_chars}: need 1 <= min <= max")
        for name in ("min_ascii", "min_letters", "min_unique_words"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}={v} is out of range; expected [0, 1]")

    def reject_reason(self, text: str) -> str | None:
        """Why ``text`` is rejected, or None to keep it.

        >>> f = PromptFilter()
        >>> f.reject_reason("Can you help me plan a vegetable garden?") is None
        True
        >>> f.reject_reason("hi"), f.reject_reason("ok ok ok ok ok ok ok ok ok ok ok ok ok")
        ('too_short', 'repetitive')
        """
        t = text.strip()
        if len(t) < self.min_chars:
            return "too_short"
        if len(t) > self.max_chars:
            return "too_long"
        if "<|" in t or "|>" in t:
            return "template_marker"
        words = t.split()
        if len(words) < self.min_words:
            return "too_few_words"
        if sum(c.isascii() for c in t) < self.min_ascii * len(t):
            return "not_ascii"
        visible = [c for c in t if not c.isspace()]
        if sum(c.isalpha() for c in visible) < self.min_letters * len(visible):
            return "not_prose"
        if len(words) >= 12 and len({w.casefold() for w in words}) < self.min_unique_words * len(words):
            return "repetitive"
        return None


class Deduper:
    """Drops exact (normalised) repeats and near-repeats that share their first 12 words."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    @staticmethod
    def _keys(text: str) -> list[str]:
        norm = re.sub(r"[^\w\s]", "", normalize_prompt(text))
        words = norm.split()
        return [norm] + ([" ".join(words[:12])] if len(words) >= 12 else [])

    def __contains__(self, text: str) -> bool:
        """True if ``text`` repeats one seen before (without remembering it)."""
        return any(k in self._seen for k in self._keys(text))

    def add(self, text: str) -> bool:
        """True if ``text`` is new (and remember it)."""
        if text in self:
            return False
        self._seen.update(self._keys(text))
        return True


def user_prefix_ids(tokenizer, system: str | None = None) -> list[int]:
    """Token ids of the chat template up to where a user's text begins (Magpie's input).

    Rendered from the template with a sentinel user message, so it works for any template;
    the template's default system prompt is kept unless ``system`` replaces it.
    """
    sentinel = "\u2063PEAGLE_USER\u2063"
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": sentinel}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    if sentinel not in text:
        raise ValueError("the chat template does not render the user message verbatim; cannot cut its prefix")
    return list(tokenizer(text[: text.index(sentinel)], add_special_tokens=False)["input_ids"])


def turn_joints(tokenizer) -> tuple[list[int], list[int]]:
    """The template's token ids between turns, for extending a conversation by a user turn.

    Returns:
        ``(to_user, to_assistant)``: from the end of an assistant's text to the start of the
        next user's text, and from the end of a user's text to the start of the reply.

    Raises:
        ValueError: the template does not render messages verbatim.
    """
    marks = ["\u2063PEAGLE_U1\u2063", "\u2063PEAGLE_A1\u2063", "\u2063PEAGLE_U2\u2063"]
    messages = [{"role": r, "content": m} for r, m in zip(("user", "assistant", "user"), marks)]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if any(m not in text for m in marks):
        raise ValueError("the chat template does not render messages verbatim; cannot find its turn boundaries")
    a_end, u_start = text.index(marks[1]) + len(marks[1]), text.index(marks[2])
    to_user, to_assistant = (list(tokenizer(t, add_special_tokens=False)["input_ids"])
                             for t in (text[a_end:u_start], text[u_start + len(marks[2]):]))
    return to_user, to_assistant


def join_turn(ids: Sequence[int], joint: Sequence[int]) -> list[int]:
    """``ids`` then ``joint``, without repeating an end-of-turn token the model already generated.

    >>> join_turn([5, 2], [2, 7, 1]), join_turn([5], [2, 7, 1])
    ([5, 2, 7, 1], [5, 2, 7, 1])
    """
    return list(ids) + list(joint[1:] if ids and joint and ids[-1] == joint[0] else joint)


def derive_seed(*parts) -> int:
    """A 62-bit seed from ``parts``, stable across runs and Python versions (``hash`` is not).

    >>> derive_seed(0, "magpie", 1) == derive_seed(0, "magpie", 1) != derive_seed(0, "magpie", 2)
    True
    """
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") >> 2


ENGINE_TIMES = ("prefills", "prefill_s", "decode_s", "warmup_s", "prefill_warmup_s", "steps", "row_steps",
                "decode_tokens")


class Budget:
    """When to stop admitting prompts (a deadline, a token allowance), and tokens made.

    >>> b = Budget(max_tokens=10); b.add(4); b.exhausted()
    >>> b.add(6); b.exhausted(), b.stopped_by
    ('token_target', 'token_target')
    """

    def __init__(self, deadline: float | None = None, max_tokens: int | None = None) -> None:
        self.deadline, self.max_tokens = deadline, max_tokens
        self.tokens, self.stopped_by = 0, None  # stopped_by: why the first admission was refused
        # where generation time went, summed over decoding runs (see record): the card's per-phase split
        self.engine = {k: 0.0 if k.endswith("_s") else 0 for k in ENGINE_TIMES}

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def record(self, stats: StreamStats) -> None:
        """One decoding run's figures (``StreamStats`` of a ``StreamDecoder.generate``).

        ``row_steps`` counts rows holding an unfinished request, summed over decode steps, so
        ``decode_tokens / row_steps`` is how busy the rows were; ``warmup_s`` (decode-graph capture,
        first compilation) happens inside the decode time, ``prefill_warmup_s`` (prefill graphs) inside
        the prefill time.
        """
        e = self.engine
        for k in ENGINE_TIMES:
            e[k] += getattr(stats, k)

    def exhausted(self) -> str | None:
        """Why no new prompt may start (``"time_budget"`` / ``"token_target"``), or None."""
        reason = ("time_budget" if self.deadline is not None and time.monotonic() > self.deadline else
                  "token_target" if self.max_tokens is not None and self.tokens >= self.max_tokens else None)
        self.stopped_by = self.stopped_by or reason
        return reason


def decode_all(target, prompts: list[list[int]], *, temperature: float, max_new_tokens: int, concurrency: int,
               seed: int, budget: Budget | None = None, progress: bool = True,
               desc: str = "decoding") -> list[list[int] | None]:
    """Every prompt decoded by one ``StreamDecoder`` (continuous batching, ``concurrency`` rows).

    No prompt starts once ``budget`` is exhausted; the tokens of each finished request are added
    to it, and the run's time split is recorded in it.

    Returns:
        The new tokens per prompt (EOS kept), None for prompts the budget left out.
    """
    from tqdm.auto import tqdm

    if not prompts:
        return []
    dec = StreamDecoder(target, concurrency=min(concurrency, len(prompts)), temperature=temperature, seed=seed)
    with tqdm(total=len(prompts), desc=desc, disable=not progress) as bar:
        res = dec.generate(prompts, max_new_tokens, tuple(target.config.eos_token_ids),
                           admit=None if budget is None else (lambda: not budget.exhausted()),
                           on_result=None if budget is None else (lambda q, toks: budget.add(len(toks))),
                           progress=bar.update)
    if budget is not None:
        budget.record(res.stats)
    return res.tokens


def sample_user_turns(target, tokenizer, prefixes: list[list[int]], *, temperatures: Sequence[float],
                      max_new_tokens: int, concurrency: int, seed: int, budget: Budget | None = None,
                      progress: bool = True, desc: str = "user turns",
                      openings: list[list[int]] | None = None) -> tuple[list[str | None], set[int]]:
    """One user turn sampled after each prefix: prefix ``k`` at ``temperatures[k % len]``, each
    temperature one ``decode_all`` run (seed ``seed + j`` for the ``j``-th); none starts once
    ``budget`` is exhausted. ``openings[k]``: the tail of prefix ``k`` that already belongs to the
    user's text (decoded together with what the target adds).

    Returns:
        ``(texts, skipped)``: per prefix the stripped text, None where the turn did not end with an
        end-of-turn token; and the prefixes the budget left out.
    """
    eos = tuple(target.config.eos_token_ids)
    texts: list[str | None] = [None] * len(prefixes)
    skipped: set[int] = set()
    for j, temp in enumerate(temperatures):
        mine = list(range(j, len(prefixes), len(temperatures)))
        outs = decode_all(target, [prefixes[k] for k in mine], temperature=temp, max_new_tokens=max_new_tokens,
                          concurrency=concurrency, seed=seed + j, budget=budget, progress=progress,
                          desc=f"{desc} (T={temp:g})")
        for k, toks in zip(mine, outs):
            if toks is None:
                skipped.add(k)
            elif toks and toks[-1] in eos:
                head = list(openings[k]) if openings else []
                texts[k] = tokenizer.decode(head + list(toks[:-1]), skip_special_tokens=False).strip()
    return texts, skipped


def _verdicts(texts: list[str | None], skipped: set[int], filt: PromptFilter, exclude: Exclusions | None,
              examples: Deduper | None = None) -> list[str]:
    """``"kept"`` or why each sampled user turn is dropped (``skipped``: the budget left it out;
    ``examples``: few-shot requests that a sample must not repeat)."""
    exclude, dedup, out = exclude if exclude is not None else Exclusions(), Deduper(), []
    for k, text in enumerate(texts):
        reason = "skipped_budget" if k in skipped else "unfinished" if text is None else filt.reject_reason(text)
        if not reason and examples is not None and text in examples:
            reason = "copied_example"
        if not reason and not exclude.allows(text):
            reason = "excluded"
        out.append(reason or ("kept" if dedup.add(text) else "duplicate"))
    return out


def assign_domains(n: int, domains=MAGPIE_DOMAINS, seed: int = 0) -> list[str]:
    """``n`` domain names in proportion to their weights (largest remainder), in seeded order.

    Raises:
        ValueError: ``n`` < 0, no domains, or a weight <= 0.

    >>> sorted(assign_domains(6, (("a", None, 2), ("b", None, 1)), seed=0))
    ['a', 'a', 'a', 'a', 'b', 'b']
    """
    if n < 0 or not domains or any(w <= 0 for _, _, w in domains):
        raise ValueError(f"n={n}, weights {[w for _, _, w in domains]}: need n >= 0 and at least one domain, "
                         "each with a weight > 0")
    total = sum(w for _, _, w in domains)
    exact = [n * w / total for _, _, w in domains]
    counts = [int(x) for x in exact]
    for j in sorted(range(len(domains)), key=lambda j: counts[j] - exact[j])[: n - sum(counts)]:
        counts[j] += 1
    names = [d for (d, _, _), c in zip(domains, counts) for _ in range(c)]
    random.Random(seed).shuffle(names)
    return names


def magpie_prompts(target, tokenizer, num_samples: int, *, domains=MAGPIE_DOMAINS,
                   temperatures: tuple[float, ...] = (0.7, 0.9, 1.0), max_new_tokens: int = 64,
                   concurrency: int = 256, seed: int = 0, filt: PromptFilter = PromptFilter(),
                   exclude: Exclusions | None = None, budget: Budget | None = None,
                   progress: bool = True) -> tuple[list[tuple[str, str]], dict[str, Counter]]:
    """Sample ``num_samples`` user turns from ``target`` and keep the good, new ones.

    Args:
        domains: ``(name, system prompt, weight)`` rows; the samples are spread over them by
            weight (``assign_domains``, seeded), each sampled under its system prompt: a string,
            None (the template's default) or ``RequestOpenings``: then the template's default, and
            the user turn begins with a seeded opening (by the sample's index) from its pool;
            samples that copy a pool request are dropped (``copied_example``).
        temperatures, concurrency, seed, budget: as in ``sample_user_turns``.
        filt, exclude: what a kept turn must pass; duplicates are dropped too.

    Returns:
        ``(prompts, stats)``: kept ``(text, domain)`` pairs in sampling order, and per domain
        the count of every outcome (``kept``, ``unfinished``, ``duplicate``, ``excluded``,
        ``skipped_budget`` and the filter's reasons), which adds up to ``num_samples``.
    """
    systems = {name: system for name, system, _ in domains}
    names = assign_domains(num_samples, domains, seed)
    pools = {name: s for name, s in systems.items() if isinstance(s, RequestOpenings)}
    fixed = {name: user_prefix_ids(tokenizer, None if name in pools else s) for name, s in systems.items()}
    examples = Deduper()
    for text in (t for s in pools.values() for t in s.pool):
        examples.add(text)
    openings = [list(tokenizer(pools[d].opening(random.Random(derive_seed(seed, "opening", k))),
                               add_special_tokens=False)["input_ids"]) if d in pools else []
                for k, d in enumerate(names)]
    texts, skipped = sample_user_turns(target, tokenizer, [fixed[d] + o for d, o in zip(names, openings)],
                                       temperatures=temperatures, max_new_tokens=max_new_tokens,
                                       concurrency=concurrency, seed=seed, budget=budget, progress=progress,
                                       desc="magpie prompts", openings=openings)
    verdicts = _verdicts(texts, skipped, filt, exclude, examples)
    stats: dict[str, Counter] = {name: Counter() for name in systems}
    for domain, verdict in zip(names, verdicts):
        stats[domain][verdict] += 1
    return [(texts[k], names[k]) for k, v in enumerate(verdicts) if v == "kept"], stats


def follow_up_turns(target, tokenizer, conversations: list[list[int]], *,
                    temperatures: tuple[float, ...] = (0.7, 0.9, 1.0), max_new_tokens: int = 64,
                    concurrency: int = 256, seed: int = 0, filt: PromptFilter = PromptFilter(),
                    exclude: Exclusions | None = None, budget: Budget | None = None,
                    progress: bool = True) -> tuple[list[str | None], Counter]:
    """Magpie after a conversation: the target writes the user's next message.

    Args:
        conversations: ids of each conversation up to the next user's text (``join_turn``).

    Returns:
        ``(turns, stats)``: per conversation the kept text or None, and the outcome counts.
    """
    texts, skipped = sample_user_turns(target, tokenizer, conversations, temperatures=temperatures,
                                       max_new_tokens=max_new_tokens, concurrency=concurrency, seed=seed,
                                       budget=budget, progress=progress, desc="follow-up turns")
    verdicts = _verdicts(texts, skipped, filt, exclude)
    return [texts[k] if v == "kept" else None for k, v in enumerate(verdicts)], Counter(verdicts)


@dataclass(frozen=True)
class StdlibFunction:
    """A documented standard-library function, the raw material of a coding prompt."""

    module: str
    name: str
    signature: str
    summary: str  # the docstring's first sentence or paragraph, one line


def stdlib_functions(modules: Iterable[str] = STDLIB_MODULES, max_summary: int = 240) -> list[StdlibFunction]:
    """Public, documented functions of ``modules`` with a readable signature, sorted."""
    found = []
    for mod_name in modules:
        mod = importlib.import_module(mod_name)
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.ismethod(obj)):
                continue
            if inspect.isfunction(obj) and obj.__module__ != mod.__name__:
                continue  # re-exported from elsewhere
            doc = inspect.getdoc(obj)
            try:  # a default's repr holds its memory address, which would differ in every process
                sig = re.sub(r"<function ([\w.]+) at 0x[0-9a-f]+>", r"\1", str(inspect.signature(obj)))
            except (TypeError, ValueError):
                continue
            if not doc or len(sig) > 160 or " at 0x" in sig:
                continue
            para = " ".join(doc.split("\n\n")[0].split())
            first = re.split(r"(?<=[.!?])\s", para, maxsplit=1)[0]
            summary = first if len(first) <= max_summary else first[: max_summary].rsplit(" ", 1)[0] + "…"
            if len(summary) >= 12:
                found.append(StdlibFunction(mod_name, name, sig, summary))
    return found


def code_prompts(functions: list[StdlibFunction], per_function: int = 2, seed: int = 0,
                 exclude: Exclusions | None = None) -> list[tuple[str, str]]:
    """Coding prompts, ``per_function`` templates each (seeded choice).

    Returns:
        ``[(prompt, group)]`` where ``group`` names the function, so a split can keep all
        prompts about one function on the same side.
    """
    rng = random.Random(seed)
    exclude = exclude if exclude is not None else Exclusions()
    out = []
    for f in functions:
        for template in rng.sample(CODE_TEMPLATES, min(per_function, len(CODE_TEMPLATES))):
            text = template.format(module=f.module, name=f.name, sig=f.signature, summary=f.summary)
            if exclude.allows(text):
                out.append((text, f"{f.module}.{f.name}"))
    return out

"""Training prompts without a hub: Magpie-style chat turns and standard-library coding tasks.

* **Magpie** (Xu et al. 2024): give an aligned chat model only the template's prefix up to
  the start of a user turn (``…<|im_start|>user\\n``) and sample; it writes a plausible user
  request, ending it with its end-of-turn token. Samples are filtered (complete, length,
  mostly-ASCII prose, not repetitive, no template markers) and deduplicated.
* **Coding prompts** are built from the signatures and docstrings of public functions in a
  fixed list of Python standard-library modules (``inspect``), phrased by a few templates.

Every prompt passes ``Exclusions`` first, so benchmark prompts (HumanEval, the bench
workloads, the demo prompts) never become training data. Both sources are deterministic
for a seed (Magpie given the same device and dtype; docstrings vary across Python versions,
which the data card records).
"""
from __future__ import annotations

import importlib
import inspect
import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from ..config import SpecConfig
from ..engine import SpecDecoder

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

    def add(self, text: str) -> bool:
        """True if ``text`` is new (and remember it)."""
        norm = re.sub(r"[^\w\s]", "", normalize_prompt(text))
        words = norm.split()
        keys = [norm] + ([" ".join(words[:12])] if len(words) >= 12 else [])
        if any(k in self._seen for k in keys):
            return False
        self._seen.update(keys)
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


def magpie_prompts(target, tokenizer, num_samples: int, *, temperatures: tuple[float, ...] = (0.7, 0.9, 1.0),
                   max_new_tokens: int = 64, concurrency: int = 256, seed: int = 0,
                   filt: PromptFilter = PromptFilter(), exclude: Exclusions | None = None,
                   deadline: float | None = None, progress: bool = True) -> tuple[list[str], Counter]:
    """Sample ``num_samples`` user turns from ``target`` and keep the good, new ones.

    Chunk ``i`` of ``concurrency`` samples uses ``temperatures[i % len]`` and seed ``seed + i``.

    Returns:
        ``(prompts, stats)``: kept texts in sampling order, and counts of every outcome
        (``kept``, ``unfinished``, ``duplicate``, ``excluded`` and the filter's reasons).
    """
    from tqdm.auto import tqdm

    prefix = user_prefix_ids(tokenizer)
    eos = tuple(target.config.eos_token_ids)
    exclude = exclude if exclude is not None else Exclusions()
    dedup, kept, stats = Deduper(), [], Counter()
    chunks = range(0, num_samples, concurrency)
    for i, start in enumerate(tqdm(chunks, desc="magpie prompts", disable=not progress)):
        if deadline is not None and time.monotonic() > deadline:
            stats["skipped_time_budget"] += num_samples - start
            break
        c = min(concurrency, num_samples - start)
        cfg = SpecConfig(method="baseline", temperature=temperatures[i % len(temperatures)],
                         max_new_tokens=max_new_tokens, seed=seed + i)
        for toks in SpecDecoder(target, None, cfg).generate([prefix] * c, eos_token_ids=eos).tokens:
            if not toks or toks[-1] not in eos:
                stats["unfinished"] += 1
                continue
            text = tokenizer.decode(toks[:-1], skip_special_tokens=False).strip()
            reason = filt.reject_reason(text)
            if reason:
                stats[reason] += 1
            elif not exclude.allows(text):
                stats["excluded"] += 1
            elif not dedup.add(text):
                stats["duplicate"] += 1
            else:
                kept.append(text)
                stats["kept"] += 1
    return kept, stats


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
            try:
                sig = str(inspect.signature(obj))
            except (TypeError, ValueError):
                continue
            if not doc or len(sig) > 160:
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

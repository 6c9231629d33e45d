"""Magpie from openings: user turns that start with the first words of a hand-written request.

Plain Magpie writes what the target likes to ask, and the domain system prompts only steer the
topic: the requests come out in a narrow range of forms (mostly "Can you explain …" and "What
is …"). On the chat workload the shipped heads draft worse than on held-out Magpie text of the
same target confidence (``docs/training.md``, "What limits the heads"), which
points at coverage of request *kinds*. Here each sample's user turn is begun for the target
with the first one to ``max_words`` words of a request from a pool we wrote by hand
(``data/request_pool.jsonl``: writing, role-play, reasoning, math, coding, extraction, science,
humanities, everyday and opinion requests, terse and long), and the target finishes it: "Pretend
you" becomes a role-play set-up, "Classify these" a labelling task, "Write a bedtime" a writing
request. The response to each is generated later under the template's default system prompt,
like every other prompt.

Showing SmolLM2-135M whole example requests in the system prompt (few-shot Magpie) was tried
first and dropped: on a CPU sample of 48, 27 user turns ran past 64 tokens and most of the rest
were not requests at all (continued Q/A transcripts, fragments), while openings kept 41 of 48,
nearly all of them readable requests.

A sample that repeats a pool request (``Deduper``'s test: the same normalised text or the same
first 12 words) is dropped as ``copied_example``, so the pool itself never becomes training
data; none of its requests is a benchmark prompt (``tests/test_prompts_pool.py``).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

POOL_PATH = Path(__file__).with_name("data") / "request_pool.jsonl"


def load_request_pool(path: str | Path = POOL_PATH) -> tuple[str, ...]:
    """The pool's request texts, in file order (JSONL objects with a ``text``).

    Raises:
        ValueError: a line is not a JSON object with a non-empty ``text``, or the pool is empty.
    """
    texts = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line).get("text")
        except (json.JSONDecodeError, AttributeError) as e:
            raise ValueError(f"{path}:{n}: expected a JSON object with a 'text', got {line[:60]!r}") from e
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:{n}: 'text' must be a non-empty string, got {text!r}")
        texts.append(text.strip())
    if not texts:
        raise ValueError(f"{path} holds no requests")
    return tuple(texts)


@dataclass(frozen=True)
class RequestOpenings:
    """A Magpie domain whose user turns start with 1..``max_words`` words of a pool request (seeded).

    >>> o = RequestOpenings(("Pretend you are a pirate.", "Classify these words by colour."), max_words=2)
    >>> sorted({o.opening(random.Random(s)) for s in range(40)})
    ['Classify', 'Classify these', 'Pretend', 'Pretend you']
    """

    pool: tuple[str, ...]
    max_words: int = 3

    def __post_init__(self) -> None:
        if not self.pool:
            raise ValueError("the request pool is empty")
        if self.max_words < 1:
            raise ValueError(f"max_words={self.max_words} must be at least 1")

    def opening(self, rng: random.Random) -> str:
        """The first words of a random pool request: how one sampled user turn begins."""
        words = rng.choice(self.pool).split()
        return " ".join(words[: rng.randint(1, min(self.max_words, len(words)))])

    def __str__(self) -> str:  # what the data card records for this domain
        return (f"openings: the user turn begins with the first 1-{self.max_words} words of one of "
                f"{len(self.pool)} hand-written requests (peagle_lab/train/data/request_pool.jsonl)")

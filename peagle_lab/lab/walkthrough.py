"""One decode step taken apart: prefill, draft (EAGLE-3 or P-EAGLE), verify, every part kept.

``SpecDecoder`` runs this loop for real and keeps only counters and timings. Notebook 1
wants to look inside one step, so here each stage returns what it made; both call the same
functions of :mod:`peagle_lab.step`:

```
prefill(target, prompts)            ─► taps [c, T, 3H], new token [c], target KV cache
one_step(target, drafter, pre, k)   ─► draft batch ─► K drafts ─► target([c, K+1]) ─► VerifyResult
oracle_drafts(target, pre, k, ...)  ─► drafts equal to the target's own greedy choice, with
                                       chosen positions made wrong (a "what if" drafter)
```
Timings use ``time.perf_counter`` on CPU and are synchronised on CUDA; a single step is
noisy, so ``median_step`` summarises the engine's per-step trace for the timeline figures.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass

import torch

from .. import step
from ..config import SpecConfig
from ..drafter import Drafter
from ..drafting import DraftResult
from ..engine import SpecDecoder, StepTrace
from ..heads import bundled_head_dir
from ..models.kv_cache import KVCache
from ..models.llama import LlamaModel
from ..verify import VerifyResult, verify_greedy

__all__ = ["Prefill", "OneStep", "prefill", "one_step", "oracle_drafts", "median_step", "shipped_head_facts",
           "bench_step_split", "best_k", "interleaved_draft_ms"]


@dataclass(frozen=True, eq=False)
class Prefill:
    """The target's pass over the prompts, and what drafting needs from it."""

    lengths: tuple[int, ...]  # prompt lengths
    token_ids: torch.Tensor  # [c, T] prompts, right-padded with 0
    positions: torch.Tensor  # [c, T]
    taps: torch.Tensor  # [c, T, 3H] the residual stream entering the aux layers
    new_tokens: torch.Tensor  # [c] the target's greedy next token: the first bonus slot
    cache: KVCache  # the target's KV cache, prompts written
    max_len: int  # KV slots per request

    @property
    def num_requests(self) -> int:
        return len(self.lengths)


@dataclass(frozen=True, eq=False)
class OneStep:
    """One draft-and-verify step after a prefill."""

    method: str  # "eagle3" | "peagle"
    k: int
    draft: DraftResult  # the drafter's K tokens and its first-pass batch
    drafts: torch.Tensor  # [c, K] what was verified (the drafter's tokens unless replaced)
    verify: VerifyResult
    target_choice: torch.Tensor  # [c, K+1] the target's argmax at each verify slot
    trace: StepTrace  # the step's timings, as the engine records them


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.inference_mode()
def prefill(target: LlamaModel, prompts: list[list[int]], *, extra_positions: int = 32) -> Prefill:
    """Run the target over ``prompts`` (token-id lists), greedy, keeping taps and cache.

    Args:
        prompts: one token-id list per request; lengths may differ (right-padded).
        extra_positions: KV room after the longest prompt for the steps that follow.

    Raises:
        ValueError: an empty batch or prompt.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
    ids, pos, lens = step.pad_prompts(prompts, target.device)
    max_len = ids.shape[1] + extra_positions
    cache = target.allocate_cache(len(prompts), max_len)
    out = step.prefill(target, ids, pos, lens, cache, max_len)
    return Prefill(tuple(lens.tolist()), ids, pos, out.taps, step.sample(out.logits[:, 0], 0.0), cache, max_len)


@torch.inference_mode()
def one_step(target: LlamaModel, drafter: Drafter, pre: Prefill, *, k: int, backend: str = "auto",
             drafts: torch.Tensor | None = None) -> OneStep:
    """Draft K tokens after ``pre`` with ``drafter``'s method, then verify them greedily.

    Args:
        k: K, draft tokens.
        backend: draft-batch kernels, "auto" | "torch" | "triton".
        drafts: optional ``[c, K]`` tokens to verify instead of the drafter's (see
            ``oracle_drafts``); the drafter still runs, so timings stay real.

    Returns:
        OneStep; its trace has the verify, prep and draft times in milliseconds.
    """
    method, dev = drafter.config.method, target.device
    c = pre.num_requests
    lens = torch.tensor(pre.lengths, device=dev)
    n, new = lens - 1, pre.new_tokens  # every prompt token is context: "accepted" up to the last
    dcache = drafter.allocate_cache(c, pre.max_len)
    _sync(dev)
    t0 = time.perf_counter()
    batch = step.prepare_draft(drafter, pre.taps, pre.token_ids, pre.positions, n, new, k, pre.max_len, backend)
    _sync(dev)
    t1 = time.perf_counter()
    draft = step.draft(drafter, dcache, pre.taps, pre.token_ids, pre.positions, n, new, k=k, max_len=pre.max_len,
                       backend=backend, batch=batch)
    _sync(dev)
    t2 = time.perf_counter()
    verified = draft.tokens if drafts is None else drafts.to(dev)
    if tuple(verified.shape) != (c, k):
        raise ValueError(f"drafts has shape {tuple(verified.shape)}, expected [c, K] = [{c}, {k}]")
    vids, vpos, vslots = step.verify_inputs(new, verified, lens, pre.max_len)  # [c, K+1] each
    logits = target(vids, vpos, cache=pre.cache, slot_mapping=vslots, return_taps=False).logits
    result = verify_greedy(logits, verified)
    _sync(dev)
    t3 = time.perf_counter()
    trace = StepTrace(0, 1000 * (t3 - t2), 1000 * (t1 - t0), 1000 * (t2 - t1),
                      tuple(result.num_accepted.tolist()), draft.num_forwards)
    return OneStep(method, k, draft, verified, result, logits.argmax(-1), trace)


def oracle_drafts(target: LlamaModel, pre: Prefill, k: int, wrong_at: list[int | None]) -> torch.Tensor:
    """Drafts equal to the target's own greedy continuation, wrong where asked.

    Request b's drafts are the K tokens plain greedy decoding produces after its new token,
    except that position ``wrong_at[b]`` (if not None) holds a different token, so greedy
    verification accepts exactly ``wrong_at[b]`` drafts there (all K when None).

    Returns:
        ``[c, K]`` int64 target ids.
    """
    c = pre.num_requests
    if len(wrong_at) != c:
        raise ValueError(f"wrong_at has {len(wrong_at)} entries, expected one per request ({c})")
    if any(w is not None and not 0 <= w < k for w in wrong_at):
        raise ValueError(f"wrong_at={wrong_at}: each entry must be None or a draft position in [0, {k})")
    prompts = [pre.token_ids[b, :n].tolist() for b, n in enumerate(pre.lengths)]
    plain = SpecDecoder(target, None, SpecConfig(method="baseline", max_new_tokens=k + 1))
    res = plain.generate(prompts, eos_token_ids=())  # no EOS stop: always k+1 tokens
    truth = torch.tensor([t[1: k + 1] for t in res.tokens], device=target.device)  # [c, K]
    for b, w in enumerate(wrong_at):
        if w is not None:
            truth[b, w] = (truth[b, w] + 1) % target.config.vocab_size
    return truth


def median_step(trace: list[StepTrace]) -> StepTrace:
    """The per-part medians of a step trace (the first step is dropped as warm-up if there are more).

    >>> t = [StepTrace(i, v, 1.0, 2.0 * i, (0,), 5) for i, v in enumerate([90.0, 10.0, 12.0, 11.0])]
    >>> m = median_step(t)
    >>> m.step, m.verify_ms, m.prep_ms, m.draft_ms, m.num_accepted, m.drafter_forwards, m.rows
    (-1, 11.0, 1.0, 4.0, (0,), 5, None)
    """
    if not trace:
        raise ValueError("the trace is empty: generate at least two tokens")
    steps = trace[1:] if len(trace) > 1 else trace
    # A step with no drafting (the last one) would pull the draft medians to zero.
    drafting = [s for s in steps if s.drafter_forwards] or steps
    med = statistics.median
    accepted = tuple(round(med(s.num_accepted[i] for s in steps if len(s.num_accepted) > i))
                     for i in range(max(len(s.num_accepted) for s in steps)))
    return StepTrace(-1, med(s.verify_ms for s in steps), med(s.prep_ms for s in drafting),
                     med(s.draft_ms for s in drafting), accepted, max(s.drafter_forwards for s in steps),
                     max((s.rows for s in steps if s.rows), default=None))


def shipped_head_facts(method: str) -> dict | None:
    """What a shipped head's ``summary.json`` records: layers, draft vocabulary, training and chat acceptance.

    Returns:
        ``{"layers", "draft_vocab_size", "token_passes", "runs", "device", "chat_al_k7"}``, or None
        where no head ships for ``method``. ``token_passes`` counts target tokens over every
        training run the head went through; ``chat_al_k7`` is the acceptance length on the
        ``chat`` workload at K = 7 measured when the head was exported.
    """
    folder = bundled_head_dir(method)
    if folder is None or not (folder / "summary.json").is_file():
        return None
    s = json.loads((folder / "summary.json").read_text())
    runs = s.get("cumulative", {}).get("runs") or [s]
    chat = {r["k"]: r["acceptance_length"] for r in s.get("workloads", {}).get("chat", [])}
    return {"layers": s["num_hidden_layers"], "draft_vocab_size": s["draft_vocab_size"],
            "token_passes": sum(r["tokens"] for r in runs), "runs": len(runs), "device": s.get("device"),
            "chat_al_k7": chat.get(7)}


def bench_step_split(bench: dict, *, k: int, concurrency: int = 1, workload: str = "chat") -> dict[str, dict]:
    """One step's parts per method from a ``bench.json`` (``peagle-lab bench``): plain decoding, and each
    speculative method at ``k``.

    Returns:
        ``{method: {"verify_ms", "prep_ms", "draft_ms", "step_ms", "acceptance_length", "tps"}}``
        for the temperature-0 rows at ``concurrency`` and ``workload``.

    >>> row = dict(concurrency=1, workload="chat", temperature=0.0, verify_ms=1.0, prep_ms=0.0, draft_ms=0.5,
    ...            step_ms=1.5, acceptance_length=2.0, tps=1300.0)
    >>> bench_step_split({"rows": [dict(row, method="peagle", k=3), dict(row, method="peagle", k=5)]}, k=3)
    {'peagle': {'verify_ms': 1.0, 'prep_ms': 0.0, 'draft_ms': 0.5, 'step_ms': 1.5, 'acceptance_length': 2.0, 'tps': 1300.0}}
    """
    keys = ("verify_ms", "prep_ms", "draft_ms", "step_ms", "acceptance_length", "tps")
    out = {}
    for r in bench["rows"]:
        if (r["concurrency"], r["workload"], r.get("temperature", 0.0)) != (concurrency, workload, 0.0):
            continue
        if r["method"] == "baseline" or r["k"] == k:
            out[r["method"]] = {key: r[key] for key in keys}
    if not out:
        raise ValueError(f"no temperature-0 rows at c = {concurrency}, workload {workload!r}, K = {k} in the bench")
    return out


def best_k(bench: dict, method: str, *, concurrency: int = 1, workload: str = "chat") -> dict:
    """The temperature-0 row of ``method`` with the highest TPS at ``concurrency`` and ``workload``."""
    rows = [r for r in bench["rows"] if r["method"] == method and r["concurrency"] == concurrency
            and r["workload"] == workload and r.get("temperature", 0.0) == 0.0]
    if not rows:
        raise ValueError(f"no {method} rows at c = {concurrency}, workload {workload!r} in the bench")
    return max(rows, key=lambda r: r["tps"])


def interleaved_draft_ms(target: LlamaModel, drafters: dict[str, Drafter], prompts: list[list[int]], *, k: int,
                         repeats: int = 3, max_new_tokens: int = 24) -> dict[str, float]:
    """Median drafting time per decode step of each method, its runs interleaved so that a busy machine slows
    all methods alike (the first step of each run is warm-up and is dropped).

    Returns:
        ``{method: median draft_ms over the drafting steps of all runs}``.
    """
    steps: dict[str, list[float]] = {m: [] for m in drafters}
    for _ in range(repeats):
        for method, drafter in drafters.items():
            cfg = SpecConfig(method=method, num_speculative_tokens=k, max_new_tokens=max_new_tokens)
            trace = SpecDecoder(target, drafter, cfg).generate(prompts).trace
            steps[method] += [s.draft_ms for s in trace[1:] if s.drafter_forwards]
    return {m: statistics.median(v) for m, v in steps.items() if v}

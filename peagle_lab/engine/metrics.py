"""What a ``generate`` call reports: vLLM's spec-decode counters, per-step traces, and timing that
adds no host synchronisation.

```
Counts.add(accepted per request)   each step  ─► drafts, accepted, accepted per position
Timer.mark()                       around each part of a step (CUDA events on a GPU)
Counts.metrics(...)                at the end ─► Metrics (AL, acceptance rate, TPS, TPOT)
step_trace(timer, ...)             at the end ─► StepTrace per step (read after the last sync)
```
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..acceptance import acceptance_length, per_position_acceptance

__all__ = ["IDLE_CONTEXT", "StepTrace", "Metrics", "GenerationResult", "Timer", "Counts", "step_trace", "step_contexts",
           "context_summary"]

IDLE_CONTEXT = 1  # an idle row's context: its bonus token sits at position 0 (state.verify_batch)


@dataclass(frozen=True)
class StepTrace:
    """What one decode step did and how long its parts took (milliseconds)."""

    step: int
    verify_ms: float
    prep_ms: float  # draft-batch construction (prepare_draft_inputs + fill_draft_hidden + fc)
    draft_ms: float  # drafter passes and sampling
    num_accepted: tuple[int, ...]  # per active request
    drafter_forwards: int
    rows: int | None = None  # the batch rows the step ran (fewer than c once a static batch compacts)
    # The contexts the step attends to (a row's context: its prompt and the tokens it has made, which its
    # first query sees), from the host's bookkeeping (``step_contexts``): summed over the busy rows (those
    # holding an unfinished request) and their longest; summed over every row the step runs and their
    # longest (an idle row's is IDLE_CONTEXT: it runs at positions 0..K). None where not recorded.
    context_sum: int | None = None
    longest_context: int | None = None
    row_context_sum: int | None = None
    longest_row_context: int | None = None


@dataclass(frozen=True)
class Metrics:
    """vLLM's spec-decode counters and derived rates for one ``generate`` call."""

    method: str
    k: int
    num_requests: int
    num_steps: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: tuple[int, ...]
    output_tokens: int
    prefill_s: float  # prompts' prefills, each request's first draft included
    decode_s: float
    first_draft_s: float = 0.0  # of prefill_s, the first drafts' share (device time; 0 for plain decoding)

    @property
    def acceptance_length(self) -> float:
        """AL = 1 + accepted / drafts (counts the bonus token); 1.0 for plain decoding."""
        return acceptance_length(self.num_accepted_tokens, self.num_drafts)

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        return tuple(per_position_acceptance(self.accepted_per_position, self.num_drafts))

    @property
    def tps(self) -> float:
        """Output tokens per second over all requests (prefill included)."""
        total = self.prefill_s + self.decode_s
        return self.output_tokens / total if total > 0 else 0.0

    @property
    def tpot_ms(self) -> float:
        """Decode time per output token of one request (the first token excluded)."""
        per_req = self.output_tokens / max(self.num_requests, 1) - 1
        return 1000.0 * self.decode_s / per_req if per_req > 0 else 0.0

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["accepted_per_position"] = list(self.accepted_per_position)
        for k in ("acceptance_length", "acceptance_rate", "tps", "tpot_ms"):
            d[k] = getattr(self, k)
        d["per_position_acceptance"] = list(self.per_position_acceptance)
        return d


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # new tokens per request (EOS included when it stopped there)
    metrics: Metrics
    trace: list[StepTrace] = field(default_factory=list)


class Timer:
    """Wall-clock sections; on CUDA, events so that timing adds no host synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())
        return len(self.marks) - 1

    def ms(self, a: int, b: int) -> float:
        if self.cuda:
            return self.marks[a].elapsed_time(self.marks[b])
        return 1000.0 * (self.marks[b] - self.marks[a])


class Counts:
    """vLLM's spec-decode counters, accumulated over the steps of one ``generate``."""

    def __init__(self, k: int) -> None:
        self.k, self.drafts, self.accepted = k, 0, 0
        self.per_position = [0] * k

    def add(self, accepted: list[int]) -> None:
        """One step: each request that was decoding drafted once and kept ``accepted[i]`` drafts."""
        self.drafts += len(accepted)
        self.accepted += sum(accepted)
        for n in accepted:
            for i in range(n):
                self.per_position[i] += 1

    def metrics(self, method: str, c: int, steps: int, output_tokens: int, prefill_s: float,
                decode_s: float, first_draft_s: float) -> Metrics:
        return Metrics(method, self.k, c, steps, self.drafts, self.drafts * self.k, self.accepted,
                       tuple(self.per_position), output_tokens, prefill_s, decode_s, first_draft_s)


def step_trace(timer: Timer, i: int, m0: int, m1: int, marks, accepted: tuple[int, ...], forwards: int,
               rows: int, contexts: tuple = ()) -> StepTrace:
    """A ``StepTrace`` from the timer's marks (read after the final synchronisation); ``contexts``: the
    step's ``step_contexts``."""
    prep = timer.ms(marks[0], marks[1]) if marks else 0.0
    draft = timer.ms(marks[1], marks[2]) if marks else 0.0
    return StepTrace(i, timer.ms(m0, m1), prep, draft, accepted, forwards, rows, *contexts)


def step_contexts(contexts: list[int], done: list[bool], ran: list[bool] | None = None) -> tuple[int, int, int, int]:
    """One step's contexts from each row's (``contexts``, tokens; ``done``: the row holds no unfinished
    request): (sum over busy rows, longest busy row, sum over every row, longest row).

    A row's context is its prompt plus the tokens it has made: its bonus token's position + 1, the keys
    the step's first query of that row sees (its K drafts see up to K more). The decode step runs every
    row; a row the device ran idle sits at positions 0..K (``state.verify_batch``), so its context is
    ``IDLE_CONTEXT``. ``ran``: the rows the device ran as live (its ``State.active``; default: the busy
    rows). Plain decoding queues a step before the host reads the one before, so a request that just
    finished may run live once more: done, yet at its own context.

    >>> step_contexts([10, 30, 20], [False, True, False])
    (30, 20, 31, 20)
    >>> step_contexts([10, 30, 20], [False, True, False], ran=[True, True, True])
    (30, 20, 60, 30)
    """
    ran = [not d for d in done] if ran is None else ran
    busy = [n for n, d in zip(contexts, done) if not d]
    rows = [n if r else IDLE_CONTEXT for n, r in zip(contexts, ran)]
    return sum(busy), max(busy, default=0), sum(rows), max(rows, default=0)


def context_summary(trace: list[StepTrace]) -> dict:
    """A call's (or several calls') step contexts, in tokens: ``mean_context`` over busy row-steps,
    ``longest_context`` the steps' longest busy row averaged over steps; ``mean_row_context`` and
    ``longest_row_context`` the same over every row the steps ran. {} where a step did not record them.

    >>> t = [StepTrace(0, 1.0, 0.0, 0.0, (0, 0), 1, 3, 30, 20, 60, 30), StepTrace(1, 1.0, 0.0, 0.0, (0,), 1, 3, 21, 21, 63, 31)]
    >>> context_summary(t)
    {'mean_context': 17.0, 'longest_context': 20.5, 'mean_row_context': 20.5, 'longest_row_context': 30.5}
    """
    if not trace or any(s.context_sum is None or not s.rows for s in trace):
        return {}
    busy, rows, steps = sum(len(s.num_accepted) for s in trace), sum(s.rows for s in trace), len(trace)
    return {"mean_context": sum(s.context_sum for s in trace) / max(busy, 1),
            "longest_context": sum(s.longest_context for s in trace) / steps,
            "mean_row_context": sum(s.row_context_sum for s in trace) / rows,
            "longest_row_context": sum(s.longest_row_context for s in trace) / steps}

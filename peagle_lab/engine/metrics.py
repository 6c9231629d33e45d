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

__all__ = ["StepTrace", "Metrics", "GenerationResult", "Timer", "Counts", "step_trace"]


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
               rows: int) -> StepTrace:
    """A ``StepTrace`` from the timer's marks (read after the final synchronisation)."""
    prep = timer.ms(marks[0], marks[1]) if marks else 0.0
    draft = timer.ms(marks[1], marks[2]) if marks else 0.0
    return StepTrace(i, timer.ms(m0, m1), prep, draft, accepted, forwards, rows)

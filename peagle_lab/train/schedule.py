"""The learning-rate schedule: one function of training progress, continuous everywhere.

Progress is ``p = (step + 1) / total_steps`` for the step about to be taken, and nothing
else: no clock, no second counter. (A time budget is turned into ``total_steps`` once, by
timing a few steps before training starts; see ``loop.Trainer``.) Two shapes:

```
lr                       wsd (warm-up / stable / decay)        cosine
peak ┤    ┌────────────────────┐                         ┌──╮
     │   ╱                      ╲                        ╱    ╲╮
 min ┤  ╱                        ╲_                     ╱       ╲__
     └──┴──────────────────────┴──┴─► p            └──┴──────────┴─► p
        0  warmup          1-decay  1                 0  warmup      1
```
WSD suits training that continues across sessions: the stable phase can be extended, and
each session ends with its own decay from a checkpoint that a later session warm-starts from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("wsd", "cosine")


@dataclass(frozen=True)
class Schedule:
    """The shape of the learning rate over a run, as fractions of the run."""

    kind: str = "wsd"  # "wsd" (warm-up, stable, linear decay) or "cosine" (warm-up, cosine decay)
    warmup: float = 0.02  # share of the run spent warming up linearly from 0
    decay: float = 0.2  # wsd: the final share spent decaying linearly to min_ratio
    min_ratio: float = 0.05  # the learning rate at the end, as a share of the peak

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"schedule kind={self.kind!r} is not one of {', '.join(map(repr, SCHEDULES))}")
        for name in ("warmup", "decay", "min_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}={v!r} is out of range; expected a number in [0, 1]")
        if self.kind == "wsd" and self.warmup + self.decay > 1.0:
            raise ValueError(f"warmup={self.warmup} + decay={self.decay} exceed the whole run (1.0)")

    def factor(self, progress: float) -> float:
        """The learning rate at ``progress`` in [0, 1], as a share of the peak.

        >>> s = Schedule("wsd", warmup=0.1, decay=0.5, min_ratio=0.0)
        >>> [round(s.factor(p), 3) for p in (0.05, 0.1, 0.3, 0.5, 0.75, 1.0)]
        [0.5, 1.0, 1.0, 1.0, 0.5, 0.0]
        >>> c = Schedule("cosine", warmup=0.0, min_ratio=0.0)
        >>> [round(c.factor(p), 3) for p in (0.0, 0.5, 1.0)]
        [1.0, 0.5, 0.0]
        """
        p = min(max(progress, 0.0), 1.0)
        if self.warmup > 0 and p < self.warmup:
            return p / self.warmup
        lo = self.min_ratio
        if self.kind == "wsd":
            start = 1.0 - self.decay
            if p <= start or self.decay == 0:
                return 1.0
            return lo + (1.0 - lo) * (1.0 - p) / self.decay
        t = (p - self.warmup) / max(1.0 - self.warmup, 1e-12)
        return lo + (1.0 - lo) * 0.5 * (1.0 + math.cos(math.pi * t))

    def lr(self, peak: float, step: int, total_steps: int) -> float:
        """The learning rate of 0-based ``step`` out of ``total_steps`` (its progress is (step+1)/total)."""
        if total_steps < 1:
            raise ValueError(f"total_steps={total_steps} must be >= 1")
        return peak * self.factor((step + 1) / total_steps)

"""Numbers derived from result rows: best K, method ratios, pooled acceptance and the goals.

Everything here is a pure function of ``BenchRow``s, shared by the report, the figures in
``peagle_lab.bench.plots`` and the CLI's headline table.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .schema import BenchResult, BenchRow


def best_k(rows: list[BenchRow], source: str = "peagle_lab") -> dict[tuple, BenchRow]:
    """The highest-TPS row per (workload, temperature, method, concurrency); ties go to the smaller K.

    This is the blog's comparison: each method at its own best K for each concurrency.

    >>> from peagle_lab.bench.schema import BenchRow
    >>> def row(k, tps):
    ...     return BenchRow("peagle", k, 1, "chat", 0.0, tps, 1.0, 1.0, [0.0] * k, 1, 0, 1, 1, 1, 10)
    >>> best = best_k([row(3, 90.0), row(5, 120.0), row(7, 120.0)])
    >>> best[("chat", 0.0, "peagle", 1)].k
    5
    """
    best: dict[tuple, BenchRow] = {}
    for r in rows:
        if r.source != source:
            continue
        key = (r.workload, r.temperature, r.method, r.concurrency)
        cur = best.get(key)
        if cur is None or r.tps > cur.tps or (r.tps == cur.tps and r.k < cur.k):
            best[key] = r
    return best


@dataclass(frozen=True)
class Ratio:
    """TPS of ``numerator`` over ``denominator``, each at its best K, in one cell column."""

    workload: str
    temperature: float
    concurrency: int
    ratio: float
    numerator: BenchRow
    denominator: BenchRow


def ratios(rows: list[BenchRow], numerator: str = "peagle", denominator: str = "eagle3") -> list[Ratio]:
    """Best-K TPS ratios per (workload, temperature, concurrency) where both methods ran, sorted."""
    best = best_k(rows)
    out = []
    for (w, t, m, c), num in best.items():
        den = best.get((w, t, denominator, c))
        if m == numerator and den is not None and den.tps > 0:
            out.append(Ratio(w, t, c, num.tps / den.tps, num, den))
    return sorted(out, key=lambda r: (r.workload, r.temperature, r.concurrency))


@dataclass(frozen=True)
class Acceptance:
    """Acceptance pooled over every concurrency of one (workload, temperature, method, K)."""

    workload: str
    temperature: float
    method: str
    k: int
    acceptance_length: float
    per_position: tuple[float, ...]
    num_drafts: int


def pooled_acceptance(rows: list[BenchRow], source: str = "peagle_lab") -> list[Acceptance]:
    """AL and per-position acceptance per K, pooling the drafts of all concurrencies.

    Acceptance does not depend on c (the same prompts, greedy), so pooling only adds drafts;
    each cell is weighted by its ``num_drafts``.
    """
    acc: dict[tuple, list] = defaultdict(lambda: [0, 0.0, None])
    for r in rows:
        if r.source != source or r.method == "baseline" or not r.num_drafts:
            continue
        a = acc[(r.workload, r.temperature, r.method, r.k)]
        a[0] += r.num_drafts
        a[1] += r.num_accepted_tokens
        if r.per_position_acceptance:
            weighted = [p * r.num_drafts for p in r.per_position_acceptance]
            a[2] = weighted if a[2] is None else [x + y for x, y in zip(a[2], weighted)]
    out = [Acceptance(w, t, m, k, 1 + n_acc / n, tuple(p / n for p in pos) if pos else (), n)
           for (w, t, m, k), (n, n_acc, pos) in acc.items()]
    return sorted(out, key=lambda a: (a.workload, a.temperature, a.method, a.k))


def step_split(row: BenchRow) -> str:
    """One line: where a decode step of ``row`` goes (medians; "other" = host work and gaps)."""
    parts = [(n, getattr(row, f"{n}_ms")) for n in ("verify", "draft", "prep")]
    known = sum(v for _, v in parts if v is not None)
    text = " + ".join(f"{n} {v:.2f}" for n, v in parts if v)
    if row.step_ms is not None:
        text = f"step {row.step_ms:.2f} ms = {text} + other {max(row.step_ms - known, 0.0):.2f}"
    label = f"{row.method} K={row.k}" if row.k else row.method
    return f"{label}: AL {row.acceptance_length:.2f}, {text} ms"


@dataclass(frozen=True)
class Goal:
    """One acceptance goal of issue 6, measured as a ratio within one run."""

    name: str
    target: float  # the ratio to reach
    measured: float | None  # None: the cells were not measured
    detail: str

    @property
    def passed(self) -> bool | None:
        return None if self.measured is None else self.measured >= self.target


def _ratio_goal(name: str, target: float, r: Ratio | None, what: str) -> Goal:
    if r is None:
        return Goal(name, target, None, f"not measured ({what} missing or skipped)")
    detail = (f"{r.numerator.method} K={r.numerator.k}: {r.numerator.tps:.0f} tok/s vs "
              f"{r.denominator.method}{f' K={r.denominator.k}' if r.denominator.k else ''}: "
              f"{r.denominator.tps:.0f} tok/s")
    if r.ratio < target:
        detail += (f"; short by {100 * (1 - r.ratio / target):.0f}%. Step split — "
                   f"{step_split(r.numerator)}; {step_split(r.denominator)}")
    return Goal(name, target, r.ratio, detail)


def check_goals(result: BenchResult) -> list[Goal]:
    """The issue's goals, each a ratio from this one run (at every temperature measured).

    - P-EAGLE / EAGLE-3 TPS ≥ 1.5× at c=1 on every workload, ≥ 1.05× at c=64;
    - P-EAGLE / plain decoding TPS ≥ 2× at c=1 on code;
    - our plain decoding step at least as fast as transformers' static-cache ``generate``
      (their TPOT / ours ≥ 1) wherever the reference ran.
    """
    rows = result.rows
    temps = sorted({r.temperature for r in rows if r.source == "peagle_lab"})
    workloads = list(dict.fromkeys(r.workload for r in rows if r.source == "peagle_lab"))
    pe = {(r.workload, r.temperature, r.concurrency): r for r in ratios(rows, "peagle", "eagle3")}
    pb = {(r.workload, r.temperature, r.concurrency): r for r in ratios(rows, "peagle", "baseline")}
    goals = []
    for t in temps:
        tag = f" (T={t:g})" if len(temps) > 1 else ""
        for w in workloads:
            goals.append(_ratio_goal(f"P-EAGLE/EAGLE-3 TPS, c=1, {w}{tag}", 1.5, pe.get((w, t, 1)), "c=1 cells"))
        for w in workloads:
            goals.append(_ratio_goal(f"P-EAGLE/EAGLE-3 TPS, c=64, {w}{tag}", 1.05, pe.get((w, t, 64)), "c=64 cells"))
        goals.append(_ratio_goal(f"P-EAGLE/baseline TPS, c=1, code{tag}", 2.0, pb.get(("code", t, 1)),
                                 "c=1 code cells"))
        ours = {(r.workload, r.concurrency): r for r in rows
                if r.source == "peagle_lab" and r.method == "baseline" and r.temperature == t}
        for ref in (r for r in rows if r.source == "transformers" and r.temperature == t):
            name = f"transformers/our baseline TPOT, c={ref.concurrency}, {ref.workload}{tag}"
            mine = ours.get((ref.workload, ref.concurrency))
            if mine is None or not mine.tpot_ms:
                goals.append(Goal(name, 1.0, None, "our baseline cell missing"))
                continue
            detail = f"transformers {ref.tpot_ms:.2f} ms/token vs ours {mine.tpot_ms:.2f} ms/token"
            if ref.agreement is not None:
                detail += f"; greedy tokens equal to ours: {100 * ref.agreement:.0f}%"
            if ref.tpot_ms < mine.tpot_ms:
                detail += f"; short by {100 * (1 - ref.tpot_ms / mine.tpot_ms):.0f}%. {step_split(mine)}"
            goals.append(Goal(name, 1.0, ref.tpot_ms / mine.tpot_ms, detail))
    return goals

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


def rows_busy(row: BenchRow) -> float | None:
    """The share of a batch's row-steps that served a request still decoding (None: not known).

    A batch decodes until its slowest request is done, and a finished request's row idles until
    then. Speculative cells count one draft round per request still decoding at each step
    (``num_drafts``); plain decoding makes one token per such request and step, after the first
    token that the prefill makes. Either count over the row-steps run is the share: plain decoding
    reads 1, speculative batches less, because their requests accept at different rates. The
    row-steps are ``row_steps`` where the row has it (a batch that compacts runs fewer rows as its
    requests finish, ``SpecConfig.compact_rows``), else steps × c.

    >>> from peagle_lab.bench.schema import BenchRow
    >>> r = BenchRow("peagle", 4, 64, "chat", 0.0, 1.0, 1.0, 2.0, [0.5] * 4, 3200, 3200, 0, 0, 0, 6400,
    ...              num_steps=80)
    >>> rows_busy(r)  # 3,200 request-steps of 80 × 64
    0.625
    >>> r.extra["row_steps"] = 4000  # the batch narrowed in its tail
    >>> rows_busy(r)
    0.8
    """
    if not row.num_steps:
        return None
    if row.method == "baseline":
        if row.num_prompts is None:
            return None
        busy = row.output_tokens - row.num_prompts
    else:
        busy = row.num_drafts
    return busy / (row.extra.get("row_steps") or row.num_steps * row.concurrency)


def step_split(row: BenchRow) -> str:
    """One line: where a decode step of ``row`` goes (medians; "other" = host work and gaps).

    At c > 1 it also says how busy the batch's rows were (``rows_busy``): where requests finish
    at different steps, the slowest one sets how many steps a batch takes.
    """
    parts = [(n, getattr(row, f"{n}_ms")) for n in ("verify", "draft", "prep")]
    known = sum(v for _, v in parts if v is not None)
    text = " + ".join(f"{n} {v:.2f}" for n, v in parts if v)
    if row.step_ms is not None:
        text = f"step {row.step_ms:.2f} ms = {text} + other {max(row.step_ms - known, 0.0):.2f}"
    label = f"{row.method} K={row.k}" if row.k else row.method
    busy = rows_busy(row) if row.concurrency > 1 else None
    tail = "" if busy is None else f", rows busy {100 * busy:.0f}% ({row.num_steps} steps)"
    return f"{label}: AL {row.acceptance_length:.2f}, {text} ms{tail}"


@dataclass(frozen=True)
class Goal:
    """One acceptance goal of the engine-speed issue, measured within one run."""

    name: str
    target: float  # the bound to reach
    measured: float | None  # None: the cells were not measured
    detail: str
    at_most: bool = False  # a time to stay under (ms) rather than a ratio to reach
    unit: str = "×"

    @property
    def passed(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured <= self.target if self.at_most else self.measured >= self.target

    @property
    def bound(self) -> str:
        """``≥ 1.3×`` or ``≤ 1.5 ms``."""
        return f"{'≤' if self.at_most else '≥'} {self.target:g}{'' if self.unit == '×' else ' '}{self.unit}"

    def value(self) -> str:
        """The measured value with its unit, ``—`` when not measured."""
        if self.measured is None:
            return "—"
        return f"{self.measured:.2f}{'' if self.unit == '×' else ' '}{self.unit}"


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


def _step_goal(name: str, limit_ms: float, row: BenchRow | None, what: str) -> Goal:
    if row is None or row.step_ms is None:
        return Goal(name, limit_ms, None, f"not measured ({what} missing or skipped)", at_most=True, unit="ms")
    return Goal(name, limit_ms, row.step_ms, step_split(row), at_most=True, unit="ms")


# The engine-speed issue's bounds (its acceptance list): ratios within one run, step times in ms.
RATIO_C1, RATIO_C64, OVER_PLAIN_CODE, OVER_TRANSFORMERS = 1.3, 1.1, 2.0, 2.0
PLAIN_STEP_C1_MS, PLAIN_STEP_C64_MS, PEAGLE_K7_STEP_C1_MS = 1.3, 2.5, 1.5


def _reference_goals(rows: list[BenchRow], t: float, tag: str) -> list[Goal]:
    """Transformers' TPOT over ours: ≥ 2× at c = 1 on chat, and reported (≥ 1×) wherever it ran."""
    ours = {(r.workload, r.concurrency): r for r in rows
            if r.source == "peagle_lab" and r.method == "baseline" and r.temperature == t}
    goals = []
    for ref in (r for r in rows if r.source == "transformers" and r.temperature == t):
        name = f"transformers/our baseline TPOT, c={ref.concurrency}, {ref.workload}{tag}"
        target = OVER_TRANSFORMERS if (ref.workload, ref.concurrency) == ("chat", 1) else 1.0
        mine = ours.get((ref.workload, ref.concurrency))
        if mine is None or not mine.tpot_ms:
            goals.append(Goal(name, target, None, "our baseline cell missing"))
            continue
        detail = f"transformers {ref.tpot_ms:.2f} ms/token vs ours {mine.tpot_ms:.2f} ms/token"
        if ref.agreement is not None:
            detail += f"; greedy tokens equal to ours: {100 * ref.agreement:.0f}%"
        if ref.tpot_ms < target * mine.tpot_ms:
            detail += f"; short by {100 * (1 - ref.tpot_ms / (target * mine.tpot_ms)):.0f}%. {step_split(mine)}"
        goals.append(Goal(name, target, ref.tpot_ms / mine.tpot_ms, detail))
    return goals


def check_goals(result: BenchResult) -> list[Goal]:
    """The engine-speed issue's goals, each from this one run (at every temperature measured).

    - P-EAGLE / EAGLE-3 TPS ≥ 1.3× at c=1 and ≥ 1.1× at c=64, on chat and code (each at its best K);
    - P-EAGLE / plain decoding TPS ≥ 2× at c=1 on code;
    - transformers' static-cache ``generate`` TPOT / ours ≥ 2× at c=1 on chat (≥ 1× elsewhere);
    - plain decode step ≤ 1.3 ms at c=1 and ≤ 2.5 ms at c=64, a P-EAGLE K=7 step ≤ 1.5 ms at c=1
      (chat; the whole speculative step, verify and drafting).
    """
    rows = result.rows
    ours = [r for r in rows if r.source == "peagle_lab"]
    temps = sorted({r.temperature for r in ours})
    workloads = [w for w in dict.fromkeys(r.workload for r in ours) if w in ("chat", "code")]
    pe = {(r.workload, r.temperature, r.concurrency): r for r in ratios(rows, "peagle", "eagle3")}
    pb = {(r.workload, r.temperature, r.concurrency): r for r in ratios(rows, "peagle", "baseline")}
    cell = {(r.workload, r.temperature, r.method, r.k, r.concurrency): r for r in ours}
    goals = []
    for t in temps:
        tag = f" (T={t:g})" if len(temps) > 1 else ""
        for c, target in ((1, RATIO_C1), (64, RATIO_C64)):
            goals += [_ratio_goal(f"P-EAGLE/EAGLE-3 TPS, c={c}, {w}{tag}", target, pe.get((w, t, c)), f"c={c} cells")
                      for w in workloads]
        goals.append(_ratio_goal(f"P-EAGLE/baseline TPS, c=1, code{tag}", OVER_PLAIN_CODE, pb.get(("code", t, 1)),
                                 "c=1 code cells"))
        goals += _reference_goals(rows, t, tag)
        for name, key, limit in (("plain step, c=1", ("baseline", 0, 1), PLAIN_STEP_C1_MS),
                                 ("plain step, c=64", ("baseline", 0, 64), PLAIN_STEP_C64_MS),
                                 ("P-EAGLE K=7 step, c=1", ("peagle", 7, 1), PEAGLE_K7_STEP_C1_MS)):
            goals.append(_step_goal(f"{name}, chat{tag}", limit, cell.get(("chat", t, *key)), "the chat cell"))
    return goals

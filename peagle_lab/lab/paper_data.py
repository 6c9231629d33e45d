"""The two sides of the paper-vs-lab tables: the paper's published figures and the lab's, read from its sweeps.

``PUBLISHED`` holds the numbers the P-EAGLE authors published, each with where it was read
(the arXiv abstract, the vLLM/AWS blog post, the vLLM pull request). Nothing there is
estimated: a number that could not be found in a source is not in the table.

Both tables (``paper_tables``) read the lab's side from the same sweeps (``lab_sweeps()``), the paper's protocol:
answers decoded to EOS on MT-Bench and HumanEval (workloads ``mt_bench`` and ``code``), c = 1, best K and acceptance
length from the sweep ``README_SWEEP`` names (one constant to swap when a newer one lands), c = 64 from the newest
continuous-batching answer-length sweep (``continuous_sweep()``), which keeps every row busy as a server (and the
paper's vLLM) does, or from ``README_SWEEP``'s static batch where none is committed. Each method runs at its best
K ∈ {3, 5, 7}, the blog's rule; throughput is output tokens/s. ``comparison`` puts every published figure beside
ours.

``peagle_lab.lab.paper`` re-exports the names its callers use.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..bench.archive import RESULTS

__all__ = ["Source", "SOURCES", "Published", "PUBLISHED", "METRIC_NAMES", "Row", "PAPER_KS", "PAPER_MODEL",
           "PAPER_HEADS", "PAPER_DEVICE", "paper_values", "paper_side", "LABEL", "LAB_NAMES", "lab_workloads",
           "ratios", "comparison", "best_ks_and_als", "README_SWEEP", "load_sweep", "check_answer_sweep",
           "continuous_sweep", "lab_sweeps", "c64_doc", "one_or_both", "measured_al"]

PAPER_KS = (3, 5, 7)  # the blog swept K ∈ {3, 5, 7} and took each method's best
_PAPER_WORKLOADS = ("MT-Bench", "HumanEval")  # the paper's two benchmarks we run, in its figures' order


@dataclass(frozen=True)
class Source:
    """Where a published number was read."""

    name: str
    url: str


SOURCES = {
    "abstract": Source("Hui et al., P-EAGLE, arXiv 2602.01469v1, abstract",
                       "https://arxiv.org/abs/2602.01469"),
    "blog": Source("P-EAGLE blog post, vLLM blog, 2026-03-13 (source: vllm-project/vllm-project.github.io, "
                   "_posts/2026-03-13-p-eagle.md; the same post is on the AWS Machine Learning blog, "
                   "https://aws.amazon.com/blogs/machine-learning/p-eagle-faster-llm-inference-with-parallel-"
                   "speculative-decoding-in-vllm/)", "https://vllm.ai/blog/p-eagle"),
    "pr": Source("vLLM pull request #32887 (Unified Parallel Drafting), benchmark section",
                 "https://github.com/vllm-project/vllm/pull/32887"),
}


@dataclass(frozen=True)
class Published:
    """One published figure: what it measures, where, its value and its source."""

    metric: str  # row key, shared with our side
    setting: str
    value: str
    source: str  # key of SOURCES
    where: str  # the figure, table or sentence in that source


PAPER_MODEL, PAPER_HEADS, PAPER_DEVICE = "GPT-OSS 20B", "4-layer P-EAGLE vs the RedHatAI EAGLE-3 head", "1 × B200"
_B200 = f"{PAPER_MODEL}, {PAPER_HEADS}, vLLM, {PAPER_DEVICE}"
PUBLISHED = (
    Published("speedup_c1", _B200 + "; MT-Bench / HumanEval / SPEED-Bench", "1.55× / 1.55× / 1.69×", "blog",
              "Figures 4–6 captions (c=1)"),
    Published("speedup_c64", _B200 + "; MT-Bench / HumanEval / SPEED-Bench", "1.05× / 1.23× / 1.25×", "blog",
              "Figures 4–6 captions (c=64)"),
    Published("speedup_range", "GPT-OSS 120B, GPT-OSS 20B, Qwen3-Coder 30B, vLLM", "1.10×–1.36×", "abstract",
              "abstract"),
    Published("speedup_plain_c1", "GPT-OSS 120B, 2-layer P-EAGLE, 1 × B200, MT-Bench, BS=1 (best K=7)",
              "1.52× plain decoding (1.12× best EAGLE-3)", "pr", "Benchmarks"),
    Published("al_peagle_k3", "P-EAGLE on GPT-OSS 20B; HumanEval / SPEED-Bench / MT-Bench", "3.02 / 2.87 / 2.87",
              "blog", "P-EAGLE (AL) table"),
    Published("al_peagle_k7", "P-EAGLE on GPT-OSS 20B; HumanEval / SPEED-Bench / MT-Bench", "3.94 / 3.38 / 3.70",
              "blog", "P-EAGLE (AL) table"),
    Published("al_eagle3_k3", "EAGLE-3 on GPT-OSS 20B; HumanEval / SPEED-Bench / MT-Bench", "2.65 / 2.24 / 2.70",
              "blog", "EAGLE-3 (AL) table"),
    Published("al_eagle3_k7", "EAGLE-3 on GPT-OSS 20B; HumanEval / SPEED-Bench / MT-Bench", "3.03 / 2.59 / 3.27",
              "blog", "EAGLE-3 (AL) table"),
    Published("al_gain", "HumanEval, AL at K=7 minus AL at K=3", "P-EAGLE +0.92, EAGLE-3 +0.38", "blog",
              "text under the AL tables"),
    Published("peak_k", "GPT-OSS 20B, K ∈ {3, 5, 7}, c = 1 … 64", "P-EAGLE K=7 at every c; EAGLE-3 mostly K=3",
              "blog", "vLLM Benchmarking section"),
)

METRIC_NAMES = {
    "speedup_c1": "P-EAGLE ÷ EAGLE-3 throughput, c = 1, each at its best K",
    "speedup_c64": "P-EAGLE ÷ EAGLE-3 throughput, c = 64, each at its best K",
    "speedup_range": "P-EAGLE ÷ EAGLE-3 throughput, range over the settings",
    "speedup_plain_c1": "P-EAGLE (best K) ÷ plain decoding, c = 1",
    "al_peagle_k3": "acceptance length, P-EAGLE, K = 3",
    "al_peagle_k7": "acceptance length, P-EAGLE, K = 7",
    "al_eagle3_k3": "acceptance length, EAGLE-3, K = 3",
    "al_eagle3_k7": "acceptance length, EAGLE-3, K = 7",
    "al_gain": "AL gain from K = 3 to K = 7",
    "peak_k": "best K (highest throughput)",
}


@dataclass(frozen=True)
class Row:
    """One line of the table: the published figure and ours for the same metric."""

    metric: str
    published: Published
    ours: str


def _by_benchmark(p: Published) -> dict[str, str] | None:
    """``p``'s value per benchmark where its setting ends in "; A / B / C" with a value for each, else None."""
    names = p.setting.rsplit("; ", 1)[1].split(" / ") if "; " in p.setting else []
    values = p.value.split(" / ")
    return dict(zip(names, values)) if names and len(names) == len(values) else None


def paper_values(metric: str) -> str:
    """The published value of ``metric`` for MT-Bench / HumanEval, in that order, read by the setting's names.

    >>> paper_values("al_peagle_k7"), paper_values("speedup_c64")
    ('3.70 / 3.94', '1.05× / 1.23×')
    """
    by = _by_benchmark(next(p for p in PUBLISHED if p.metric == metric))
    if by is None:
        raise ValueError(f"{metric!r} is not published per benchmark; expected one of "
                         f"{[p.metric for p in PUBLISHED if _by_benchmark(p)]}")
    return " / ".join(by[n] for n in _PAPER_WORKLOADS)


# ------------------------------------------------------------------ our side, from the lab's sweeps
LABEL = {"eagle3": "EAGLE-3", "peagle": "P-EAGLE"}
LAB_NAMES = {"mt_bench": "MT-Bench", "chat": "chat", "code": "HumanEval"}  # our workloads as the tables name them


def lab_workloads(bench: Mapping) -> tuple[str, str]:
    """Our counterparts of MT-Bench and HumanEval in ``bench``: ("mt_bench" where it ran, else "chat", "code")."""
    return ("mt_bench" if any(r["workload"] == "mt_bench" for r in bench["rows"]) else "chat", "code")


def _rows(bench: Mapping, method: str, workload: str, c: int) -> list[dict]:
    return sorted((r for r in bench["rows"] if r["method"] == method and r["workload"] == workload
                   and r["concurrency"] == c and r["temperature"] == 0
                   and r.get("source", "peagle_lab") == "peagle_lab"), key=lambda r: r["k"])


def _best(bench: Mapping, method: str, workload: str, c: int) -> dict | None:
    """The method's highest-throughput row among K ∈ {3, 5, 7} (all K where none of those ran)."""
    rows = _rows(bench, method, workload, c)
    pick = [r for r in rows if r["k"] in PAPER_KS] or rows
    return max(pick, key=lambda r: r["tps"]) if pick else None


def measured_al(bench: Mapping, method: str, workload: str, k: int, c: int = 1) -> float | None:
    """The AL that ``bench``'s cell (method, workload, c, K) measured at temperature 0, or None where it did not run.

    The one reading of a measured AL that docs/paper.md's rows and notebook 8's baseline section share
    (``predict.baseline_strength``), so both print the same figures.

    >>> bench = {"rows": [{"method": "peagle", "workload": "code", "concurrency": 1, "temperature": 0, "k": 3,
    ...                    "acceptance_length": 2.9}]}
    >>> measured_al(bench, "peagle", "code", 3), measured_al(bench, "peagle", "code", 7)
    (2.9, None)
    """
    row = next((r for r in _rows(bench, method, workload, c) if r["k"] == k), None)
    return None if row is None else row["acceptance_length"]


def _per_workload(values: Sequence, fmt: str) -> str:
    return " / ".join("—" if v is None else format(v, fmt) for v in values)


def _speedup(bench: Mapping, workload: str, c: int, over: str = "eagle3") -> float | None:
    p, e = _best(bench, "peagle", workload, c), _best(bench, over, workload, c)
    return p["tps"] / e["tps"] if p and e else None


def ratios(bench: Mapping, c: int) -> str:
    """P-EAGLE ÷ EAGLE-3 at ``c`` on our MT-Bench / HumanEval counterparts, each at its best K."""
    return _per_workload([_speedup(bench, w, c) for w in lab_workloads(bench)], ".2f").replace(" /", "× /") + "×"


def _ours(bench: Mapping, metric: str, c64: Mapping | None = None) -> str:
    """Our value of ``metric`` on MT-Bench / HumanEval (or chat / HumanEval): c = 1 rows and acceptance lengths from
    ``bench``, c = 64 rows from ``c64`` (``bench`` where None)."""
    docs = {1: bench, 64: bench if c64 is None else c64}
    workloads = lab_workloads(bench)
    names = [LAB_NAMES[w] for w in workloads]
    if metric in ("speedup_c1", "speedup_c64"):
        return ratios(docs[1 if metric == "speedup_c1" else 64], 1 if metric == "speedup_c1" else 64)
    if metric == "speedup_range":
        got = [s for c, doc in docs.items() for w in lab_workloads(doc) if (s := _speedup(doc, w, c)) is not None]
        return f"{min(got):.2f}×–{max(got):.2f}× ({', '.join(names)}; c = 1, 64)" if got else "—"
    if metric == "speedup_plain_c1":
        parts = []
        for w in workloads:
            p, base = _best(bench, "peagle", w, 1), _rows(bench, "baseline", w, 1)
            parts.append(f"{p['tps'] / base[0]['tps']:.2f}× (K={p['k']})" if p and base else "—")
        return " / ".join(parts)
    if metric.startswith("al_") and metric != "al_gain":
        _, method, k = metric.split("_")
        return _per_workload([measured_al(bench, method, w, int(k[1:])) for w in workloads], ".2f")
    if metric == "al_gain":
        gains = {}
        for m in ("peagle", "eagle3"):
            vals = [(measured_al(bench, m, w, 7), measured_al(bench, m, w, 3)) for w in workloads]
            gains[m] = _per_workload([a - b if a is not None and b is not None else None for a, b in vals], "+.2f")
        return f"P-EAGLE {gains['peagle']}, EAGLE-3 {gains['eagle3']}"
    if metric == "peak_k":
        def ks(m):
            return " / ".join(str(b["k"]) if (b := _best(docs[c], m, w, c)) else "—"
                              for w in workloads for c in (1, 64))
        return f"P-EAGLE {ks('peagle')}, EAGLE-3 {ks('eagle3')} ({' / '.join(f'{n} c=1, 64' for n in names)})"
    raise ValueError(f"unknown metric {metric!r}")


def comparison(bench: Mapping, c64: Mapping | None = None) -> list[Row]:
    """Every published figure beside ours, in ``PUBLISHED`` order; c = 64 from ``c64`` (``bench`` where None)."""
    return [Row(p.metric, p, _ours(bench, p.metric, c64)) for p in PUBLISHED]


# ------------------------------------------------------------------ the lab's sweeps, read once for both tables
# The answer-to-EOS sweep both tables read for c = 1, best K and AL: one bench.json with mt_bench (or chat) and code
# rows, or a folder of WORKLOAD/bench.json files (the answer-length session's layout). Swap here for a newer one.
# Their c = 64 figures come from continuous_sweep() where one is committed.
README_SWEEP = "docs/results/h100/answer_length/2026-12-06-cfc842b/bench.json"


def load_sweep(path: Path | str) -> dict:
    """The bench document at ``path``: a bench.json, or a folder's ``*/bench.json`` files merged into one
    (their rows together; run_info and config from the first, which must share the others' commit)."""
    path = Path(path)
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not a JSON file ({err}); expected a bench.json") from None
    docs = [json.loads(f.read_text()) for f in sorted(path.glob("*/bench.json"))]
    if not docs:
        raise ValueError(f"{path} is neither a bench.json nor a folder of WORKLOAD/bench.json files")
    commits = {(d.get("run_info") or {}).get("commit") for d in docs}
    if len(commits) != 1:
        raise ValueError(f"the bench files under {path} come from different commits: {sorted(map(str, commits))}")
    return {**docs[0], "rows": [r for d in docs for r in d["rows"]]}


def check_answer_sweep(bench: Mapping, source: str, c: int, continuous: bool = False) -> None:
    """Refuse ``bench`` (read from ``source``) unless it is an answer-length sweep the README's table can read.

    Args:
        bench: a bench document.
        source: where it was read, for the message.
        c: the concurrency whose P-EAGLE and EAGLE-3 rows the table reads.
        continuous: True, the sweep must batch continuously (``config.continuous`` > 0); False, either kind.

    Raises:
        ValueError: not a bench document, answers of fixed length (``config.ignore_eos`` not false), static
            batches where ``continuous`` asks otherwise, or no P-EAGLE or EAGLE-3 rows at ``c``.
    """
    cfg = bench.get("config") if isinstance(bench, Mapping) else None
    if not isinstance(cfg, Mapping) or not isinstance(bench.get("rows"), list):
        raise ValueError(f"{source} is not a bench document: expected a JSON object with 'config' and 'rows'")
    if cfg.get("ignore_eos") is not False:
        raise ValueError(f"{source} is not an answer-length sweep: config.ignore_eos is {cfg.get('ignore_eos')!r}, "
                         "expected false (each answer decoded to its end-of-sequence token)")
    if continuous and not cfg.get("continuous"):
        raise ValueError(f"{source} has config.continuous = {cfg.get('continuous')!r}; expected a sweep batching "
                         "continuously (peagle-lab bench --continuous N)")
    for m in LABEL:
        if not any(_rows(bench, m, w, c) for w in lab_workloads(bench)):
            raise ValueError(f"{source} has no {LABEL[m]} rows at c = {c} (temperature 0); the table needs them")


def continuous_sweep() -> tuple[dict, str] | None:
    """(the newest continuous-batching answer-length sweep, its path in the repository), or None where none is
    committed (``predict.answer_sweep(continuous=True)``)."""
    from .predict import answer_sweep  # predict reads this module's figures: import it only when called

    try:
        return answer_sweep(continuous=True)
    except ValueError:
        return None


def lab_sweeps(root: Path | str | None = None) -> tuple[dict, str, tuple[dict, str] | None]:
    """What both tables read unless told otherwise: (``README_SWEEP``'s document, ``README_SWEEP``,
    ``continuous_sweep()``), the first read under ``root`` (this repository where None)."""
    root = RESULTS.parents[1] if root is None else Path(root)
    return load_sweep(root / README_SWEEP), README_SWEEP, continuous_sweep()


def c64_doc(bench: Mapping, continuous: tuple[Mapping, str] | None) -> Mapping:
    """The document whose c = 64 rows a table reads: ``continuous``'s (checked: a continuous-batching answer-length
    sweep of the same heads as ``bench``), or ``bench`` itself where ``continuous`` is None.

    Raises:
        ValueError: ``continuous`` is not such a sweep, or its heads' fingerprints differ from ``bench``'s.
    """
    if continuous is None:
        return bench
    doc, path = continuous
    check_answer_sweep(doc, path, 64, continuous=True)
    digests = [(d.get("config") or {}).get("head_digests") for d in (bench, doc)]
    if all(digests) and digests[0] != digests[1]:
        raise ValueError(f"the two sweeps ran different heads ({digests[0]} and {digests[1]} in {path}); "
                         "the table's lab row needs one set")
    return doc


def one_or_both(first, second) -> str:
    return f"{first}" if first == second else f"{first} (c = 64: {second})"


def paper_side(p: Published) -> tuple[str, str]:
    """``p``'s setting and value, a per-benchmark figure's benchmarks put in the paper's figures' order (MT-Bench,
    HumanEval, then the rest) so that its first two line up with ours."""
    by = _by_benchmark(p)
    if by is None:
        return p.setting, p.value
    order = [*_PAPER_WORKLOADS, *(n for n in by if n not in _PAPER_WORKLOADS)]
    return (f"{p.setting.rsplit('; ', 1)[0]}; {' / '.join(order)}", " / ".join(by[n] for n in order))


def best_ks_and_als(bench: Mapping) -> tuple[str, str]:
    """Each method's best K at c = 1 (chat / code) and its acceptance length there."""
    best = {m: [_best(bench, m, w, 1) or {} for w in lab_workloads(bench)] for m in LABEL}
    ks = ", ".join(f"{LABEL[m]} {_per_workload([b.get('k') for b in best[m]], '')}" for m in ("peagle", "eagle3"))
    als = ", ".join(f"{LABEL[m]} {_per_workload([b.get('acceptance_length') for b in best[m]], '.2f')}"
                    for m in ("peagle", "eagle3"))
    return ks, als

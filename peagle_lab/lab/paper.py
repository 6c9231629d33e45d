"""The paper's published figures beside ours: one source for notebook 5, notebook 8, the README and ``docs/paper.md``.

This module holds the paper's figures as numbers for the scale lab (``SPEED_BENCH_SPEEDUP``, ``HUMANEVAL_AL``,
``PAPER_AL``, read from the blog) and the command line (``main``); the rest lives in two modules and is importable
from here: ``paper_data`` holds every published figure with its source (``PUBLISHED``, ``SOURCES``,
``paper_values``) and reads the lab's side from its sweeps (``lab_sweeps``, ``README_SWEEP``, ``continuous_sweep``,
``comparison``); ``paper_tables`` renders the two tables, ``docs/paper.md``'s (``markdown``, ``update_page``, between
``BEGIN``/``END``) and the README's (``readme_table``, ``update_readme``, between ``README_BEGIN``/``README_END``).

``python -m peagle_lab.lab.paper docs/paper.md`` rewrites the page's table (``tests/test_lab_paper.py`` fails while
the copy and the data disagree); ``python -m peagle_lab.lab.paper --readme README.md`` rewrites the README's
(``tests/test_readme.py`` checks it).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from ..bench.archive import RESULTS, latest
from .paper_data import (METRIC_NAMES, PUBLISHED, README_SWEEP, SOURCES, Published, Row, Source, check_answer_sweep,
                         comparison, continuous_sweep, lab_sweeps, lab_workloads, load_sweep, paper_values)
from .paper_tables import (BEGIN, END, README_BEGIN, README_END, heads_note, markdown, our_setting, readme_table,
                           update_page, update_readme)

__all__ = ["Source", "SOURCES", "Published", "PUBLISHED", "Row", "comparison", "our_setting", "markdown",
           "update_page", "BEGIN", "END", "README_SWEEP", "README_BEGIN", "README_END", "lab_sweeps",
           "load_sweep", "check_answer_sweep", "continuous_sweep", "lab_workloads", "paper_values", "heads_note",
           "readme_table", "update_readme", "METRIC_NAMES", "SPEED_BENCH_SPEEDUP", "HUMANEVAL_AL", "PAPER_AL",
           "k_sweep", "main"]

# ------------------------------------------------------------------ the paper's figures as numbers (scale lab)
# What ``peagle_lab.lab.predict`` and notebook 8 compute with, read from the blog (SOURCES["blog"]):
# GPT-OSS 20B, 4-layer P-EAGLE vs the RedHatAI EAGLE-3 head, vLLM, 1 × B200.
# P-EAGLE ÷ EAGLE-3 throughput on SPEED-Bench per concurrency, each at its best K (Figure 6).
SPEED_BENCH_SPEEDUP = {1: 1.69, 2: 1.61, 4: 1.54, 8: 1.45, 16: 1.40, 32: 1.22, 64: 1.25}
# Acceptance length on HumanEval, {(method, K): AL} (the AL tables; the same figures as PUBLISHED's al_*_k3/k7).
HUMANEVAL_AL = {("peagle", 3): 3.02, ("peagle", 7): 3.94, ("eagle3", 3): 2.65, ("eagle3", 7): 3.03}
# The same tables' ALs on every benchmark, {benchmark: {(method, K): AL}}.
PAPER_AL = {"HumanEval": HUMANEVAL_AL,
            "SPEED-Bench": {("peagle", 3): 2.87, ("peagle", 7): 3.38, ("eagle3", 3): 2.24, ("eagle3", 7): 2.59},
            "MT-Bench": {("peagle", 3): 2.87, ("peagle", 7): 3.70, ("eagle3", 3): 2.70, ("eagle3", 7): 3.27}}


def k_sweep() -> str:
    """The newest fixed-length K sweep on the H200, relative to the repository (``archive.latest``)."""
    return (latest("h200", "k_scaling") / "bench.json").relative_to(RESULTS.parents[1]).as_posix()


def _readme_main(args: Sequence[str]) -> int:
    """``--readme README.md [bench.json [continuous.json]]``: rewrite the README's table."""
    page = Path(args[0])
    root = page.resolve().parent

    def located(path: str) -> tuple[Path, str]:  # the file and its link from the README
        full = Path(path).resolve()
        return full, full.relative_to(root).as_posix() if full.is_relative_to(root) else path

    if len(args) > 1:
        path, source = located(args[1])
        bench, continuous = load_sweep(path), continuous_sweep()
    else:
        bench, source, continuous = lab_sweeps(root)
    if len(args) > 2:
        path, link = located(args[2])
        continuous = (load_sweep(path), link)
    page.write_text(update_readme(page.read_text(), bench, source, continuous))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m peagle_lab.lab.paper docs/paper.md [bench.json]``: rewrite the page's table, from the answer-length
    sweeps the README's table reads (``lab_sweeps()``: ``README_SWEEP`` for c = 1, the newest continuous-batching
    sweep for c = 64) by default, or from ``bench.json`` alone (c = 1 and c = 64 from its own rows; a fixed-length
    sweep, ``config.ignore_eos`` true, is labelled so).

    ``python -m peagle_lab.lab.paper --readme README.md [bench.json [continuous.json]]``: rewrite the README's table,
    c = 1, best K and acceptance length from ``bench.json`` (``README_SWEEP`` beside the README by default), c = 64
    from ``continuous.json`` (the newest committed continuous-batching answer-length sweep by default, else
    ``bench.json``'s static batch).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--readme"] and 1 < len(args) <= 4:
        return _readme_main(args[1:])
    if not args or args[0].startswith("--") or len(args) > 2:
        print(main.__doc__)
        return 2
    page = Path(args[0])
    root = page.resolve().parents[1]  # docs/paper.md's repository
    if len(args) > 1:
        path = Path(args[1]).resolve()
        source = path.relative_to(root).as_posix() if path.is_relative_to(root) else None
        bench, continuous = load_sweep(path), None
    else:
        bench, source, continuous = lab_sweeps(root)
    page.write_text(update_page(page.read_text(), bench, source, continuous))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

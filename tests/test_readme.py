"""The README is the front door: short, the mechanism figure and the two commands on its first screen, its
generated table in step with the committed JSON, and every local link pointing at a file that exists.

How words are counted (``rendered_words``): the text a reader sees on GitHub. HTML comments (the generated
block's markers) and link targets do not count; link and image text does; table cells count, their rules do
not; code blocks count word by word, because a reader reads them too.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from peagle_lab.lab import paper, paper_data

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_WORDS = 1200
FIRST_SCREEN = 40  # lines of Markdown
COMMANDS = ("bash scripts/setup.sh && .venv/bin/peagle-lab demo", "bash scripts/test.sh")
FIGURE = "docs/images/mechanism.svg"


def rendered_words(markdown: str) -> list[str]:
    """The words a reader sees once ``markdown`` is rendered (the rules are in the module docstring).

    >>> rendered_words("# Title\\n<!-- hidden -->\\n| a | [link](x.md) |\\n| --- | --- |\\n```bash\\nrun it\\n```")
    ['Title', 'a', 'link', 'bash', 'run', 'it']
    """
    text = re.sub(r"<!--.*?-->", " ", markdown, flags=re.DOTALL)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images keep their text only
    text = re.sub(r"^\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*$", " ", text, flags=re.MULTILINE)  # table rules
    text = re.sub(r"```", " ", text)
    return [w for w in re.split(r"[\s|]+", text) if re.search(r"\w", w)]


def test_the_readme_is_short():
    words = len(rendered_words(README.read_text()))
    assert words <= MAX_WORDS, f"README.md renders {words} words (at most {MAX_WORDS}); move detail into docs/"


def test_the_first_screen_shows_the_mechanism_figure_and_both_commands():
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    assert re.search(rf"!\[[^\]]+\]\({re.escape(FIGURE)}\)", first), f"the figure {FIGURE} is not on the first screen"
    for command in COMMANDS:
        assert f"\n{command}\n" in first, f"{command!r} is not on the first screen"
    assert (ROOT / FIGURE).is_file()


def test_the_mechanism_figure_names_both_slot_kinds():
    svg = (ROOT / FIGURE).read_text()
    assert "embed(bonus) ⊕ h_context" in svg and svg.count("embed(MASK) ⊕ h_shared") >= 2
    assert "drafter, pass 3" in svg and "one pass" in svg


def test_the_readme_carries_the_table_of_the_committed_json():
    """Stale? Run `python -m peagle_lab.lab.paper --readme README.md` and commit README.md."""
    page = README.read_text()
    bench = paper.load_sweep(ROOT / paper.README_SWEEP)
    assert paper.update_readme(page, bench, continuous=paper.continuous_sweep()) == page


def _local_links(markdown: str) -> list[str]:
    targets = re.findall(r"\]\(([^)\s]+)\)", markdown)
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and t.split("#")[0]]


def test_every_local_link_of_the_readme_exists():
    missing = [t for t in _local_links(README.read_text()) if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", ["docs/workshop.md", "docs/concepts.md", "docs/paper.md", "docs/results/README.md",
                                  "docs/training.md", "docs/vllm.md", "docs/engine.md", "docs/results/history.md"])
def test_the_readme_links_where_to_go_next(page):
    assert page in _local_links(README.read_text())


def test_the_table_reads_a_folder_of_workload_files_as_well_as_one_file(tmp_path):
    """README_SWEEP may name one bench.json or a folder of WORKLOAD/bench.json files (the answer-length session's
    layout): both give the same table; files from two commits, or no files, are refused."""
    bench = paper.load_sweep(ROOT / paper.README_SWEEP)
    for workload in paper.lab_workloads(bench):
        (tmp_path / workload).mkdir()
        rows = [r for r in bench["rows"] if r["workload"] == workload]
        (tmp_path / workload / "bench.json").write_text(json.dumps({**bench, "rows": rows}))
    merged = paper.load_sweep(tmp_path)
    assert paper.lab_workloads(merged) == paper.lab_workloads(bench)
    name = Path(paper.README_SWEEP).name
    assert paper.readme_table(merged, str(tmp_path)).replace(f"[{tmp_path.name}]({tmp_path})",
                                                             f"[{name}]({paper.README_SWEEP})") == \
        paper.readme_table(bench)
    code = tmp_path / paper.lab_workloads(bench)[1] / "bench.json"
    doc = json.loads(code.read_text())
    doc["run_info"]["commit"] = "0" * 40
    code.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="different commits"):
        paper.load_sweep(tmp_path)
    for workload in paper.lab_workloads(bench):
        shutil.rmtree(tmp_path / workload)
    with pytest.raises(ValueError, match="neither a bench.json"):
        paper.load_sweep(tmp_path)


def test_chat_reads_as_mt_bench_where_that_workload_ran():
    bench = paper.load_sweep(ROOT / paper.README_SWEEP)
    rows = [{**r, "workload": "chat" if r["workload"] == "mt_bench" else r["workload"]} for r in bench["rows"]]
    renamed = {**bench, "rows": rows}
    assert paper.lab_workloads(renamed) == ("chat", "code")
    assert paper.readme_table(renamed).replace("lab (chat / HumanEval)", "lab (MT-Bench / HumanEval)") == \
        paper.readme_table(bench)


def test_the_notebook_map_lists_every_notebook():
    listed = set(re.findall(r"^\| `(\d\d_\w+)` \|", README.read_text(), flags=re.MULTILINE))
    assert listed == {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}


def test_the_heads_note_says_when_the_heads_are_not_the_shipped_ones():
    old = paper.load_sweep(ROOT / "docs/results/h200/answer_length/2026-12-01-09fcc9b/bench.json")  # before fingerprints
    cell, note = paper.heads_note(old)
    assert "not fingerprinted ¹" in cell and "2026-12-01" in note and "docs/results/history.md" in note
    bench = paper.load_sweep(ROOT / paper.README_SWEEP)
    if paper.heads_note(bench)[1]:
        pytest.skip("the README's sweep ran with heads that no longer ship (its footnote says so)")
    assert paper.heads_note(bench)[0].startswith("the shipped heads")
    other = {**bench, "config": {**bench["config"], "head_digests": {**bench["config"]["head_digests"],
                                                                      "peagle": "0" * 16}}}
    cell, note = paper.heads_note(other)
    assert cell == "P-EAGLE not the shipped head ¹" and "fingerprint is not the shipped one's" in note


def test_the_bridge_to_the_blog_headline_quotes_the_published_figures():
    """The sentence under the table quotes the blog's c = 1 figures from ``paper.PUBLISHED``: SPEED-Bench's headline
    and the MT-Bench / HumanEval pair the lab runs. Stale? Copy the figures from peagle_lab/lab/paper_data.py."""
    c1 = next(p for p in paper.PUBLISHED if p.metric == "speedup_c1")
    by = dict(zip(c1.setting.rsplit("; ", 1)[1].split(" / "), c1.value.split(" / ")))
    text = " ".join(README.read_text().split())
    assert f"{by['SPEED-Bench']} at c = 1, is {paper_data.PAPER_MODEL} on one B200 on SPEED-Bench" in text
    assert "a benchmark the lab does not run" in text
    assert f"the same post gives {paper.paper_values('speedup_c1')}, the paper row above" in text
    assert paper_data.PAPER_DEVICE == "1 × B200"  # the sentence says "one B200"

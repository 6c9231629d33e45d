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

from peagle_lab.lab import paper

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
    assert paper.update_readme(page, bench) == page


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


def test_the_table_reads_a_folder_of_workload_files_as_the_answer_length_session_writes_them(tmp_path):
    """Swapping README_SWEEP for a folder of mt_bench/ and code/ bench files gives the same table, chat named
    mt_bench; files from two commits are refused."""
    bench = paper.load_sweep(ROOT / paper.README_SWEEP)
    for workload, ours in (("mt_bench", "chat"), ("code", "code")):
        rows = [{**r, "workload": workload} for r in bench["rows"] if r["workload"] == ours]
        (tmp_path / workload).mkdir()
        (tmp_path / workload / "bench.json").write_text(json.dumps({**bench, "rows": rows}))
    merged = paper.load_sweep(tmp_path)
    assert paper.lab_workloads(merged) == ("mt_bench", "code")
    table, folder_table = paper.readme_table(bench), paper.readme_table(merged, str(tmp_path))
    assert folder_table.replace("lab (mt_bench / code)", "lab (chat / code)").replace(
        f"[{tmp_path.name}]({tmp_path})", f"[bench.json]({paper.README_SWEEP})") == table
    doc = json.loads((tmp_path / "code" / "bench.json").read_text())
    doc["run_info"]["commit"] = "0" * 40
    (tmp_path / "code" / "bench.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="different commits"):
        paper.load_sweep(tmp_path)
    shutil.rmtree(tmp_path / "code")
    shutil.rmtree(tmp_path / "mt_bench")
    with pytest.raises(ValueError, match="neither a bench.json"):
        paper.load_sweep(tmp_path)


def test_the_notebook_map_lists_every_notebook():
    listed = set(re.findall(r"^\| `(\d\d_\w+)` \|", README.read_text(), flags=re.MULTILINE))
    assert listed == {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}

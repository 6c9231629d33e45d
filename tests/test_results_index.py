"""The results index (docs/results/README.md): its heads table equals the training evaluations it names, every
folder its K-sweep table lists exists with the commit it says, and the pages it links to exist."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs/results/README.md"
RESULTS = ROOT / "docs/results"
TRAINING = RESULTS / "h200/training"
# the heads table's rows, in order: (file, head name in that file's "heads")
HEAD_ROWS = (("results-2026-12-04-session13.json", "eagle3-1l-top1-weight-0.5"), ("results.json", "eagle3-1l"),
             ("results.json", "eagle3-1l-shipped"), ("results.json", "peagle-4l"),
             ("results.json", "peagle-4l-shipped"))


def _table_after(heading: str) -> list[list[str]]:
    """The cells of the first table under ``heading`` (header and rule left out)."""
    text = INDEX.read_text()
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def test_the_heads_table_reads_what_the_evaluations_hold():
    rows = _table_after("### The heads:")
    assert len(rows) == len(HEAD_ROWS)
    for cells, (name, head) in zip(rows, HEAD_ROWS):
        h = json.loads((TRAINING / name).read_text())["heads"][head]
        al = [h["acceptance"][str(k)]["AL"] for k in (3, 7)]
        al += [h["workloads"][w][str(k)]["AL"] for w in ("chat", "code") for k in (3, 7)]
        assert cells[4:10] == [f"{v:.2f}" for v in al], (name, head)
        assert cells[2] == f"{h['draft_vocab_size']:,}" and cells[3] == f"{h['cumulative_tokens'] / 1e6:.0f} M"
        assert ("**ships**" in cells[0]) == (head in ("eagle3-1l-top1-weight-0.5", "peagle-4l"))


def test_every_k_sweep_folder_exists_and_ran_at_the_commit_the_table_names():
    rows = _table_after("## The K sweeps under")
    assert len(rows) >= 20
    for folder, commit, *_ in rows:
        name = "bench.json" if folder.startswith("`bench.json`") else folder.strip("`") + "bench.json"
        path = RESULTS / "h200/k_scaling" / name
        if not path.is_file():  # a folder of side-by-side runs: its first bench file
            path = sorted((RESULTS / "h200/k_scaling" / folder.strip("`")).glob("*/bench.json"))[0]
        assert json.loads(path.read_text())["run_info"]["commit"].startswith(commit), folder


@pytest.mark.parametrize("link", sorted(set(re.findall(r"\]\(([^)#\s]+)", INDEX.read_text()))))
def test_every_local_link_exists(link):
    assert re.match(r"[a-z]+:", link) or (INDEX.parent / link).exists(), link

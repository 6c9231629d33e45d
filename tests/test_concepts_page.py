"""The teaching pages stay what they claim: a short tour in the paper's order, guides under their length.

docs/concepts.md is the short tour (at most 2,500 words) in the paper's order, each numbered section
pointing to the notebook that shows it; docs/training.md is a guide, not a journal (under 4,000
words); the engine's internals live on docs/engine.md. Links between these pages resolve, and their
prose names no commit (commits belong in the JSON's run_info and in docs/results/).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = ("concepts.md", "engine.md", "training.md", "paper.md", "vllm.md", "reliability.md", "scripts.md")
# the paper's order: sequential drafting, one pass, training, input prep, verification, K, measurement
TOUR = ("Speculative decoding", "The one-pass layout", "Training", "The fused input preparation",
        "Verification", "Scaling with K", "What the lab measures")


def words(name: str) -> int:
    return len((DOCS / name).read_text().split())


def prose(text: str) -> str:
    """The page without fenced code, inline code and generated blocks, where commands and paths may name commits."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"<!-- BEGIN .*?<!-- END [^>]*-->", "", text, flags=re.DOTALL)  # generated blocks
    return re.sub(r"`[^`\n]*`", "", text)


def test_concepts_is_a_short_tour():
    assert words("concepts.md") <= 2500, f"docs/concepts.md has {words('concepts.md')} words; the tour is <= 2,500"


def test_training_is_a_guide_not_a_journal():
    assert words("training.md") < 4000, f"docs/training.md has {words('training.md')} words; the guide is < 4,000"


def test_concepts_follows_the_papers_order_and_names_a_notebook_per_step():
    text = (DOCS / "concepts.md").read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    numbered = [s for s in sections if re.match(r"\d+\. ", s)]
    titles = [s.split("\n", 1)[0] for s in numbered]
    assert len(titles) == len(TOUR), titles
    for title, want in zip(titles, TOUR):
        assert title.split(". ", 1)[1].startswith(want), f"expected a section on {want!r} here, found {title!r}"
    for body in numbered[:-1]:
        assert re.search(r"notebooks? \d", body), f"section {body.splitlines()[0]!r} names no notebook"


def test_concepts_explains_cod():
    text = (DOCS / "concepts.md").read_text()
    assert "Conditional Drop-token" in text and "PARD" in text
    assert "r_min" in text and "max(r^d, r_min)" in text


def test_engine_page_is_in_the_toctree():
    index = (DOCS / "index.md").read_text()
    assert re.search(r"^engine$", index, flags=re.MULTILINE)


@pytest.mark.parametrize("name", PAGES)
def test_relative_links_resolve(name):
    text = (DOCS / name).read_text()
    for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", text):
        assert (DOCS / target).exists(), f"{name} links to {target}, which does not exist"


@pytest.mark.parametrize("name", PAGES)
def test_no_commit_ids_or_session_ordinals_in_prose(name):
    text = prose((DOCS / name).read_text())
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", h) and re.search(r"\d", h)]
    assert not hashes, f"{name} names commits in its prose: {hashes}"
    ordinal = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth"
               r"|\d+(?:st|nd|rd|th))")
    ordinals = re.findall(rf"\b{ordinal}(?:'s)? (?:training |benchmark |GPU |H200 )?session\b", text, re.I)
    assert not ordinals, f"{name} names runs by ordinal: {ordinals}"
    journal = re.findall(r"shipped until|after the [\w -]{1,30} fix|next GPU (?:session|run|call)", text, re.I)
    assert not journal, f"{name} narrates the lab's history (docs/results/history.md is the place): {journal}"

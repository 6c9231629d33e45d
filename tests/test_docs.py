"""The documentation site's structure, without building it (scripts/dev/build_docs.sh builds it).

Every module of the package has a page in the API reference, every Markdown page under docs/ is
in the landing page's toctree, and the docstring translations in docs/conf.py do what they say.
"""
from __future__ import annotations

import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sphinx.util.matching import Matcher

import peagle_lab

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load_conf():
    spec = importlib.util.spec_from_file_location("peagle_lab_docs_conf", DOCS / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    return conf


conf = _load_conf()


def package_modules() -> list[str]:
    """Every importable module of peagle_lab, private ones (a ``_`` in the path) excluded."""
    names = ["peagle_lab"] + [m.name for m in pkgutil.walk_packages(peagle_lab.__path__, "peagle_lab.")]
    return [n for n in names if not any(part.startswith("_") for part in n.split("."))]


def toctree_entries(text: str) -> list[str]:
    blocks = re.findall(r"^```\{toctree\}[^\n]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip() and not line.strip().startswith(":")]


def markdown_pages() -> list[str]:
    """Docnames of the Markdown pages Sphinx reads (docs/**/*.md less exclude_patterns)."""
    excluded = Matcher(conf.exclude_patterns)
    rels = (p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    return sorted(r[:-3] for r in rels if not excluded(r) and r != "index.md")


def test_every_module_is_in_the_api_reference():
    listed = conf.api_modules()
    missing = sorted(set(package_modules()) - set(listed))
    assert not missing, f"add these modules to docs/api.md: {missing}"
    assert len(listed) == len(set(listed)), "a module is listed twice in docs/api.md"


def test_every_listed_module_exists():
    unknown = sorted(set(conf.api_modules()) - set(package_modules()))
    assert not unknown, f"docs/api.md lists modules that do not exist: {unknown}"


@pytest.mark.parametrize("expected", ["peagle_lab.config", "peagle_lab.engine", "peagle_lab.kernels.verify",
                                      "peagle_lab.train.partition", "peagle_lab.integrations.vllm",
                                      "peagle_lab.lab.widgets", "peagle_lab.cli"])
def test_api_reference_names_the_modules_of_the_brief(expected):
    assert expected in conf.api_modules()


def test_every_page_is_in_the_toctree():
    entries = toctree_entries((DOCS / "index.md").read_text())
    missing = [page for page in markdown_pages() if page not in entries]
    assert not missing, f"add these pages to the toctree in docs/index.md: {missing}"
    assert "api" in entries and "results/README" in entries and "results/history" in entries


def test_every_toctree_entry_is_a_page_or_in_progress():
    entries = toctree_entries((DOCS / "index.md").read_text())
    dangling = [e for e in entries if not (DOCS / f"{e}.md").exists() and e not in conf.PAGES_IN_PROGRESS]
    assert not dangling, f"docs/index.md's toctree names pages that do not exist: {dangling}"
    assert set(conf.PAGES_IN_PROGRESS) <= set(entries)


def test_api_modules_parses_the_directive():
    text = "# API\n\n```{eval-rst}\n.. api-modules::\n\n   peagle_lab.a\n   peagle_lab.b\n```\n\n" \
           "```{eval-rst}\n.. api-modules::\n\n   peagle_lab.c\n```\n"
    assert conf.api_modules(text) == ["peagle_lab.a", "peagle_lab.b", "peagle_lab.c"]


def test_fences_become_literal_blocks():
    lines = ["Sketch:", "```", "a ─► b", "  c", "```", "after"]
    assert conf._fences_to_literal_blocks(lines) == ["Sketch:", "", "::", "", "    a ─► b", "      c", "", "after"]
    # outside a sketch, a literal followed by a letter gets the escaped space reStructuredText needs
    assert conf._fences_to_literal_blocks(["the ``Segment``s"]) == ["the ``Segment``\\ s"]


def test_pipe_tables_become_list_tables_and_wrapped_rows_join():
    lines = ["| name | what |", "| --- | --- |", "| ``a`` | first, |", "|  | continued |", "| b | second |"]
    assert conf._pipe_tables_to_list_tables(lines) == [
        ".. list-table::", "   :header-rows: 1", "",
        "   * - name", "     - what",
        "   * - ``a``", "     - first, continued",
        "   * - b", "     - second", ""]


def test_slashed_arguments_become_two_arguments_only_in_args():
    lines = ["Args:", "    cache / slot_mapping: where to write.", "    x: one.",
             "Returns:", "    a / b: a ratio."]
    assert conf._slashed_args(lines) == ["Args:", "    cache, slot_mapping: where to write.", "    x: one.",
                                         "Returns:", "    a / b: a ratio."]


def test_importing_the_documented_modules_loads_no_model(tmp_path):
    """autodoc imports every module: none may fetch, convert or load a model on import."""
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    env = dict(os.environ, PEAGLE_LAB_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", code, *conf.api_modules()], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_the_landing_page_gives_a_reading_order_with_the_paper_page_second():
    """A learner reads the mechanism, then the paper beside the lab, then runs the notebooks; the toctree (the
    site's sidebar) follows the same order."""
    text = (DOCS / "index.md").read_text()
    steps = re.findall(r"^\| (\d+) \| \[[^\]]+\]\(([\w/]+)\.md\) \|", text, flags=re.MULTILINE)
    order = [page for _, page in steps]
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1))
    assert order[:2] == ["concepts", "paper"] and order.index("notebooks") < order.index("engine")
    entries = toctree_entries(text)
    assert entries[:len(order)] == order, "the toctree's first entries follow the reading order"


def test_notebook_pages_link_docs_pages_from_their_copy_in_docs_notebooks():
    """A notebook links ``../docs/paper.md`` from notebooks/; its page is a copy in docs/notebooks/, where the same
    file is ``../paper.md``. Markdown cells and Markdown outputs change; code and plain-text outputs do not."""
    nb = {"cells": [
        {"cell_type": "markdown",
         "source": ["See [the paper page](../docs/paper.md) and ", "[engine](../docs/engine.md)."]},
        {"cell_type": "code", "source": "path = '../docs/paper.md'", "outputs": [
            {"output_type": "display_data", "data": {"text/markdown": "[table](../docs/results/README.md)",
                                                     "text/plain": "[table](../docs/results/README.md)"}}]},
    ]}
    page = conf.notebook_page(nb, "05_x")
    assert page["cells"][0]["source"] == ["See [the paper page](../paper.md) and ", "[engine](../engine.md)."]
    assert page["cells"][1]["source"] == "path = '../docs/paper.md'"
    data = page["cells"][1]["outputs"][0]["data"]
    assert data["text/markdown"] == "[table](../results/README.md)"
    assert data["text/plain"] == "[table](../docs/results/README.md)"

"""Sphinx configuration: Markdown pages (myst-parser) and an API reference from the docstrings.

Built by ``bash scripts/dev/build_docs.sh`` (``sphinx-build -W --keep-going -n``): offline (no
intersphinx), warning-free, and autodoc imports ``peagle_lab`` without loading any model.

The notebooks: ``notebooks.md`` lists one page per notebook, rendered by myst-nb from copies of
``../notebooks/*.ipynb`` with their committed outputs (nothing is executed). Each copy is
written into ``notebooks/`` here at every build (never committed); its plotly figures become
an interactive plotly div (plotly.js is bundled with the site, on those pages only) with the
figure's PNG copy in a ``<noscript>``, so a reader without JavaScript sees the picture.

The API reference: ``api.md`` lists the modules in ``api-modules`` directives; each becomes a
table (module, first paragraph of its docstring) and a hidden toctree of one page per module,
``api/generated/<module>.rst`` (written here at every build, never committed).
"""
from __future__ import annotations

import base64
import dataclasses
import html
import importlib
import json
import inspect
import os
import re
import shutil
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.typing import restify

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout, also where peagle_lab is not installed

logger = logging.getLogger(__name__)

project = "peagle_lab"
author = "peagle_lab contributors"
copyright = "peagle_lab contributors"  # noqa: A001 (Sphinx's name)
release = "0.1.0"

extensions = [
    "myst_nb",  # myst-parser's Markdown, and notebooks as pages
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

# Pages are Markdown; the per-module API pages written into api/generated/ are reStructuredText.
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
root_doc = "index"
# Data folders under results/ (model cards, logs, JSON) are files the pages point at, not pages.
exclude_patterns = ["_build", "results/*/**"]

# Pages named in index.md's toctree that are being written: left out of the toctree (with a
# note in the log, not a warning) while their file is missing, picked up once it exists.
PAGES_IN_PROGRESS = ("reliability",)

# --- Markdown -------------------------------------------------------------------------------
myst_heading_anchors = 3  # [text](page.md#a-heading) links resolve, and are checked

# --- Notebooks --------------------------------------------------------------------------------
NOTEBOOKS_SRC = ROOT / "notebooks"
NOTEBOOKS_DIR = DOCS / "notebooks"  # the copies myst-nb renders, written at every build
nb_execution_mode = "off"  # the committed outputs are the record: never re-run a notebook here
nb_output_stderr = "remove"  # warnings a cell printed are not part of the page

# --- API reference --------------------------------------------------------------------------
API_PAGE = DOCS / "api.md"
API_DIR = DOCS / "api" / "generated"
autodoc_default_options = {
    "members": True,
    # Each object is documented once, in the module that defines it; re-exports (peagle_lab,
    # peagle_lab.train, peagle_lab.drafting) would otherwise document it twice.
    "ignore-module-all": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# Offline build: names from other projects (torch.Tensor, numpy, plotly, the standard library)
# cannot be resolved without intersphinx, so nitpicky mode checks only our own names.
_EXTERNAL = (r"torch|np|numpy|plotly|go|ipywidgets|widgets|transformers|tokenizers|safetensors|gguf|"
             r"triton|tl|pathlib|os|io|json|argparse|collections|typing|dataclasses|enum|types|"
             r"datetime|subprocess|random|threading|contextlib|abc|re|functools|itertools|concurrent")
nitpick_ignore_regex = [
    (r"py:.*", rf"({_EXTERNAL})(\..*)?"),
    # The same names as annotations spell them once imported.
    (r"py:.*", r"(Path|Tensor|Callable|Iterable|Iterator|Sequence|Mapping|Any|Literal|Self|"
               r"Generator|Figure|Module|Parameter|ndarray|dtype|device|Namespace|TextIO|"
               r"NoneType|PathLike|MutableMapping|Hashable|TypeVar|Protocol|TypeAlias|ellipsis)"),
]

# --- HTML -----------------------------------------------------------------------------------
html_theme = "furo"
html_title = "peagle_lab"
html_show_sourcelink = False


# --- The API pages --------------------------------------------------------------------------
_API_BLOCK = re.compile(r"^\.\. api-modules::[ \t]*\n((?:[ \t]*\n|[ \t]+\S.*\n)*)", re.MULTILINE)


def api_modules(text: str | None = None) -> list[str]:
    """The modules ``api.md`` lists in its ``api-modules`` directives, in page order."""
    text = API_PAGE.read_text() if text is None else text
    return [line.strip() for block in _API_BLOCK.findall(text) for line in block.splitlines() if line.strip()]


def _write_api_pages(app) -> None:
    """One page per module, ``automodule`` of it (a module named like a function it re-exports,
    such as ``peagle_lab.train.partition``, is still documented as the module)."""
    shutil.rmtree(API_DIR, ignore_errors=True)
    API_DIR.mkdir(parents=True)
    for name in api_modules():
        (API_DIR / f"{name}.rst").write_text(f"{name}\n{'=' * len(name)}\n\n.. automodule:: {name}\n")


def _summary(module_name: str) -> str:
    """The first paragraph of a module's docstring, up to its first sketch or table."""
    doc = inspect.getdoc(importlib.import_module(module_name)) or ""
    para = []
    for line in doc.splitlines():
        if not line.strip() or line.lstrip().startswith(("```", "|", "::")):
            break
        para.append(line.strip())
    return " ".join(para)


class ApiModules(SphinxDirective):
    """``.. api-modules::``: a table of the listed modules with their summaries, and a hidden
    toctree of their pages (reStructuredText: in Markdown pages, inside ``{eval-rst}``)."""

    has_content = True

    def run(self):
        names = [line.strip() for line in self.content if line.strip()]
        rst = [".. list-table::", "   :widths: 30 70", ""]
        for name in names:
            rst += [f"   * - :py:mod:`{name}`", f"     - {_summary(name) or ' '}"]
        rst += ["", ".. toctree::", "   :hidden:", ""]
        rst += [f"   api/generated/{name}" for name in names]
        return self.parse_text_to_nodes("\n".join(rst))


# --- Docstrings in the house style ----------------------------------------------------------
# Docstrings are read in a terminal and by help() first, so they draw sketches in Markdown
# fences and tables in Markdown pipes, and document two related arguments as ``a / b: ...``.
# Sphinx reads reStructuredText: these hooks translate, before napoleon parses the sections.
_FENCE = re.compile(r"^(\s*)```[\w-]*\s*$")
_PIPE_ROW = re.compile(r"^(\s*)\|.*\|\s*$")
_PIPE_RULE = re.compile(r"^\s*\|[\s:|-]+\|\s*$")
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Keyword Args|Keyword Arguments|Other Parameters"
                      r"|Attributes|Raises|Returns|Yields|Example|Examples|Note|Notes)\s*:\s*$")
_LITERAL_THEN_WORD = re.compile(r"(``[^`\s](?:[^`]*[^`\s])?``)(?=\w)")
_SLASHED_ARGS = re.compile(r"^(\s+)(\*{0,2}\w+(?:\s*/\s*\*{0,2}\w+)+)(\s*(?:\([^)]*\))?\s*:)")


def _fences_to_literal_blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    indent: str | None = None
    for line in lines:
        m = _FENCE.match(line)
        if m and indent is None:  # opening fence
            indent = m.group(1)
            if out and out[-1].strip():
                out.append("")
            out += [f"{indent}::", ""]
        elif m:  # closing fence
            indent = None
            out.append("")
        elif indent is not None:
            body = line[len(indent):] if line.startswith(indent) else line.lstrip()
            out.append(f"{indent}    {body}" if line.strip() else "")
        else:  # ``Segment``s: reStructuredText ends a literal only before a space or punctuation
            out.append(_LITERAL_THEN_WORD.sub(r"\1\\ ", line))
    return out


def _pipe_tables_to_list_tables(lines: list[str]) -> list[str]:
    """A Markdown pipe table becomes a list-table; a row whose first cell is empty continues
    the row above (the house style wraps long cells that way)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _PIPE_ROW.match(lines[i])
        if not (m and i + 1 < len(lines) and _PIPE_RULE.match(lines[i + 1])):
            out.append(lines[i])
            i += 1
            continue
        indent = m.group(1)
        header = _cells(lines[i])
        rows: list[list[str]] = []
        i += 2
        while i < len(lines) and _PIPE_ROW.match(lines[i]):
            cells = _cells(lines[i])
            if rows and not cells[0]:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
            else:
                rows.append(cells)
            i += 1
        if out and out[-1].strip():
            out.append("")
        out += [f"{indent}.. list-table::", f"{indent}   :header-rows: 1", ""]
        for row in [header, *rows]:
            for j, cell in enumerate(row):
                out.append(f"{indent}   {'* -' if j == 0 else '  -'} {cell}".rstrip())
        out.append("")
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _slashed_args(lines: list[str]) -> list[str]:
    """``a / b: ...`` in an Args section becomes ``a, b: ...``, which napoleon documents as two."""
    out, in_args = [], False
    for line in lines:
        section = _SECTION.match(line)
        if section:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters", "Keyword Args",
                                           "Keyword Arguments", "Other Parameters")
        elif in_args:
            line = _SLASHED_ARGS.sub(lambda m: m.group(1) + re.sub(r"\s*/\s*", ", ", m.group(2)) + m.group(3),
                                     line)
        out.append(line)
    return out


def _house_style_to_rst(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = _slashed_args(_pipe_tables_to_list_tables(_fences_to_literal_blocks(lines)))
    # A class's real bases (autodoc's show-inheritance would also print "Bases: object").
    bases = [b for b in getattr(obj, "__bases__", ()) if b is not object] if what in ("class", "exception") else []
    if bases:
        lines[:0] = ["Bases: " + ", ".join(restify(b, mode="smart") for b in bases), ""]


def _dataclass_factories(app, what, name, obj, options, signature, return_annotation):
    """A dataclass field's ``default_factory`` shows as ``<factory>``, which Sphinx cannot parse
    (it then splits the signature at every comma); show the call instead, ``dict()``."""
    if not signature or "<factory>" not in signature or not dataclasses.is_dataclass(obj):
        return None
    for f in dataclasses.fields(obj):
        if f.init and f.default_factory is not dataclasses.MISSING:
            factory = getattr(f.default_factory, "__qualname__", "factory")
            signature = signature.replace("<factory>", f"{factory}()", 1)
    return signature, return_annotation


class RepositoryLinks(SphinxTransform):
    """Links from a page to files that are not pages.

    - outside docs/ (``../scripts/test.sh``, ``../notebooks/…``, ``../README.md``): the site has
      no such file, so the link becomes its repository path as code, after the link text;
    - inside docs/ but not a page (``results/h200/bench.json``, an excluded model card): a
      download link, the file copied into the site.

    A link to a file that does not exist anywhere stays a broken link, and myst warns.
    """

    default_priority = 500

    def apply(self) -> None:
        srcdir = Path(os.path.abspath(self.env.srcdir))
        for node in list(self.document.findall(addnodes.pending_xref)) + list(
                self.document.findall(addnodes.download_reference)):
            if node.get("reftype") != "myst":
                continue
            if isinstance(node, addnodes.download_reference):
                target = Path(os.path.normpath(Path(self.env.doc2path(self.env.docname)).parent / node["reftarget"]))
            elif node.get("refdomain") == "doc" and node["reftarget"] not in self.env.found_docs:
                target = self._page_path(srcdir, node["reftarget"])
                if target is None:
                    continue
            else:
                continue
            if target.is_relative_to(srcdir):
                if not isinstance(node, addnodes.download_reference):
                    node.replace_self(self._download(node, target))
                continue
            node.replace_self(self._repository_path(node, target))

    def _page_path(self, srcdir: Path, docname: str) -> Path | None:
        for suffix in self.config.source_suffix:
            path = Path(os.path.normpath(srcdir / f"{docname}{suffix}"))
            if path.is_file():
                return path
        return None

    def _download(self, node, target: Path):
        rel = os.path.relpath(target, Path(self.env.doc2path(self.env.docname)).parent)
        new = addnodes.download_reference(refdomain=None, reftarget=rel, refdoc=self.env.docname,
                                          reftype="myst", refexplicit=True)
        new += node.children
        return new

    def _repository_path(self, node, target: Path):
        try:
            shown = target.relative_to(ROOT).as_posix()
        except ValueError:
            shown = target.as_posix()
        text = node.astext().strip().strip("`")
        literal = nodes.literal(shown, shown)
        if text in ("", shown, target.name, node.get("reftarget", "")):
            return literal
        return nodes.inline("", "", *node.children, nodes.Text(" ("), literal, nodes.Text(")"))


def _drop_pages_in_progress(app, docname: str, source: list[str]) -> None:
    """Leave a page of ``PAGES_IN_PROGRESS`` out of index.md's toctree while its file is missing."""
    if docname != root_doc:
        return
    for page in PAGES_IN_PROGRESS:
        if not (DOCS / f"{page}.md").exists():
            logger.info("docs: %s.md does not exist yet; left out of the toctree", page)
            source[0] = re.sub(rf"^{re.escape(page)}[ \t]*\n", "", source[0], flags=re.MULTILINE)


# --- The notebook pages ----------------------------------------------------------------------
_PLOTLY = "application/vnd.plotly.v1+json"


def _figure_html(figure: dict, png: str | None, div_id: str) -> str:
    """An interactive plotly div for a figure's JSON, its PNG copy in a <noscript> beside it.

    The figure is drawn on the page's ``load`` event: the theme loads plotly.js after the body.
    """
    layout = figure.get("layout") or {}
    spec = json.dumps({"data": figure.get("data", []), "layout": layout}).replace("</", "<\\/")
    alt = html.escape(str((layout.get("title") or {}).get("text") or "figure"))
    still = f'<noscript><img src="data:image/png;base64,{png}" alt="{alt}"/></noscript>' if png else ""
    height = layout.get("height") or 500
    # The div gets its height only when the figure is drawn: without JavaScript it takes no room.
    return (f'<div class="notebook-figure"><div id="{div_id}" style="width:100%"></div>'
            f'<script type="application/json" id="{div_id}-spec">{spec}</script>'
            f'<script>window.addEventListener("load", function () {{ var f = JSON.parse(document.getElementById('
            f'"{div_id}-spec").textContent), el = document.getElementById("{div_id}"); el.style.height = "{height}px"; '
            f'Plotly.newPlot(el, f.data, f.layout, {{responsive: true}}); }});</script>{still}</div>')


def _site_links(text):
    """Markdown links written for ``notebooks/`` (``../docs/paper.md``) as seen from the page's copy in
    ``docs/notebooks/`` (``../paper.md``): the same file, one folder less to climb. ``text`` is a string or a
    notebook's list of lines."""
    if isinstance(text, list):
        return [_site_links(line) for line in text]
    return text.replace("](../docs/", "](../")


def notebook_page(nb: dict, stem: str) -> dict:
    """A notebook ready for myst-nb: its Markdown's links to ``../docs/`` point within the site, and every plotly output
    also carries ``text/html`` (see the module docstring)."""
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "markdown":
            cell["source"] = _site_links(cell.get("source", ""))
        for j, out in enumerate(cell.get("outputs", [])):
            data = out.get("data", {})
            if "text/markdown" in data:
                data["text/markdown"] = _site_links(data["text/markdown"])
            if _PLOTLY in data:  # myst-nb has no renderer for plotly's own mimetype: it gets HTML instead
                png = data.get("image/png")
                data["text/html"] = _figure_html(data.pop(_PLOTLY), "".join(png) if isinstance(png, list) else png,
                                                 f"figure-{stem}-{i}-{j}")
    return nb


def _write_notebook_pages(app) -> None:
    shutil.rmtree(NOTEBOOKS_DIR, ignore_errors=True)
    NOTEBOOKS_DIR.mkdir(parents=True)
    for path in sorted(NOTEBOOKS_SRC.glob("*.ipynb")):
        page = notebook_page(json.loads(path.read_text()), path.stem)
        (NOTEBOOKS_DIR / path.name).write_text(json.dumps(page, ensure_ascii=False))


def _plotly_on_notebook_pages(app, pagename, templatename, context, doctree) -> None:
    if pagename.startswith("notebooks/"):
        app.add_js_file("plotly.min.js")


def _copy_plotly_js(app, exception) -> None:
    """plotly.js from the installed plotly package into the site's ``_static`` (no CDN: the site works offline)."""
    if exception is None and app.builder.format == "html":
        import plotly

        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", static / "plotly.min.js")


def setup(app):
    app.add_directive("api-modules", ApiModules)
    app.add_transform(RepositoryLinks)
    app.connect("builder-inited", _write_api_pages)
    app.connect("builder-inited", _write_notebook_pages)
    app.connect("html-page-context", _plotly_on_notebook_pages)
    app.connect("build-finished", _copy_plotly_js)
    app.connect("source-read", _drop_pages_in_progress)
    app.connect("autodoc-process-signature", _dataclass_factories)
    # Before napoleon (priority 500), which reads the sections this rewrites.
    app.connect("autodoc-process-docstring", _house_style_to_rst, priority=400)

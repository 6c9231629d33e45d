"""Student copies and solutions notebooks, generated from the committed notebooks.

The committed notebooks under ``notebooks/`` hold the solutions, so they run top to bottom
(and nbval checks them). The convention for an exercise, which every notebook follows:

- the exercise is a **code cell tagged** ``exercise`` (cell metadata ``"tags": ["exercise"]``);
- the part the student writes sits between a line ``# BEGIN SOLUTION`` and a line
  ``# END SOLUTION`` (a cell may hold several such regions; code outside them, such as a
  ``def`` line and its docstring, stays in the student copy);
- a region at the top level of the cell sets names that a line before it gives a placeholder
  (``padding = None  # your count``); a region inside a ``def`` is the function's body;
- the **next code cell is the check** and hands the answer on: ``padding =
  checks.check_padding_slots(padding)``. The ``check_<name>(...)`` function of
  :mod:`peagle_lab.lab.checks` raises an ``AssertionError`` with a hint while the answer is
  wrong, prints a line starting ``correct:`` and returns the answer when it is right, and,
  while the exercise is unanswered, prints a line starting ``not answered yet:`` and returns
  the worked answer, so "Run All" on a student copy still reaches the last cell;
- the exercise and its check need only what the notebook's first code cell defines, so one
  exercise can be retried, and tested, alone.

Converting an existing exercise: tag its code cell ``exercise``, wrap the answer in the two
marker lines, add a check to :mod:`peagle_lab.lab.checks` (and its worked answer to
``checks._WORKED``), and call it in the cell below as ``answer = checks.check_<name>(answer)``.

:func:`student_notebook` replaces each region inside a block by ``raise
NotImplementedError("your code here")`` at the indentation of its ``# BEGIN SOLUTION`` line,
and each region at the top level of a cell by the comment ``# your code here``, so the
exercise cell runs and its placeholders stay; it clears every output;
:func:`solutions_notebook` keeps the source, outputs included, under a banner.
:func:`build_workshop` writes both for a folder of notebooks; relative paths in code
(``"../docs/results/…"``) are rebased so the copies run from where they are written.
``scripts/dev/build_student_notebooks.py`` is the command line.
"""
from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

__all__ = ["BEGIN", "END", "STUB", "STUB_TOP", "TAG", "NotebookConventionError", "exercise_cells", "strip_solutions",
           "student_notebook", "solutions_notebook", "build_workshop"]

TAG = "exercise"
BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
STUB = 'raise NotImplementedError("your code here")'
STUB_TOP = "# your code here: replace this line with your answer"  # a region at the top level of a cell
_RELATIVE = re.compile(r"""(["'])(\.\./[^"'\n]*)\1""")


class NotebookConventionError(ValueError):
    """A notebook breaks the exercise convention; the message names the notebook and the cell."""


def _where(name: str, index: int, cell: dict) -> str:
    return f"{name}, cell {index}" + (f" (id {cell['id']})" if cell.get("id") else "")


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def strip_solutions(source: str, where: str = "cell") -> str:
    """Replace each ``# BEGIN SOLUTION`` … ``# END SOLUTION`` region of ``source`` by the stub.

    A region inside a block gets ``STUB`` (calling the function raises ``NotImplementedError``),
    one at the top level ``STUB_TOP``, a comment, so the cell still runs.

    >>> print(strip_solutions("def f(x):\\n    # BEGIN SOLUTION\\n    return 2 * x\\n    # END SOLUTION\\n"))
    def f(x):
        raise NotImplementedError("your code here")
    <BLANKLINE>
    >>> print(strip_solutions("n = None\\n# BEGIN SOLUTION\\nn = 3\\n# END SOLUTION\\n"))
    n = None
    # your code here: replace this line with your answer
    <BLANKLINE>

    Raises:
        NotebookConventionError: a region is not closed, or closes or opens twice (``where``
            names the notebook and cell in the message).
    """
    out: list[str] = []
    open_at: int | None = None
    lines = source.splitlines(keepends=True)
    for n, line in enumerate(lines, 1):
        marker = line.strip()
        if marker == BEGIN:
            if open_at is not None:
                raise NotebookConventionError(f"{where}: line {n} opens a solution region inside the one opened "
                                              f"at line {open_at}; close it first with '{END}'")
            open_at = n
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + (STUB if indent else STUB_TOP) + "\n")
        elif marker == END:
            if open_at is None:
                raise NotebookConventionError(f"{where}: line {n} has '{END}' without a '{BEGIN}' before it")
            open_at = None
        elif open_at is None:
            out.append(line)
    if open_at is not None:
        raise NotebookConventionError(f"{where}: '{BEGIN}' at line {open_at} has no '{END}' after it")
    stripped = "".join(out)
    return stripped if source.endswith("\n") else stripped.rstrip("\n")


def _has_markers(source: str) -> bool:
    return any(line.strip() in (BEGIN, END) for line in source.splitlines())


def exercise_cells(nb: dict, name: str = "notebook") -> list[tuple[int, int]]:
    """``(exercise cell index, check cell index)`` of every exercise, after checking the convention.

    Raises:
        NotebookConventionError: markers in a cell not tagged ``exercise``, an exercise with no
            region, a region left open, or an exercise not followed by a check cell.
    """
    cells = nb.get("cells", [])
    pairs = []
    for i, cell in enumerate(cells):
        src, tagged = _source(cell), TAG in cell.get("metadata", {}).get("tags", [])
        where = _where(name, i, cell)
        if not tagged:
            if _has_markers(src):
                raise NotebookConventionError(f"{where}: solution markers in a cell not tagged '{TAG}': tag it")
            continue
        strip_solutions(src, where)
        if cell.get("cell_type") != "code" or BEGIN not in src:
            raise NotebookConventionError(f"{where}: tagged '{TAG}' but has no '{BEGIN}' region for the student")
        nxt = next((j for j in range(i + 1, len(cells)) if cells[j].get("cell_type") == "code"), None)
        if nxt is None or not re.search(r"\bcheck_\w+\(", _source(cells[nxt])):
            raise NotebookConventionError(f"{where}: the code cell after an exercise must call a check_<name>(...) "
                                          "from peagle_lab.lab.checks")
        pairs.append((i, nxt))
    return pairs


def _rebase(source: str, src_dir: Path, out_dir: Path) -> str:
    """Quoted paths starting ``../`` in ``source``, rewritten to point at the same file from ``out_dir``."""
    def fix(m: re.Match) -> str:
        target = os.path.normpath(src_dir / m.group(2))
        return f"{m.group(1)}{Path(os.path.relpath(target, out_dir)).as_posix()}{m.group(1)}"
    return _RELATIVE.sub(fix, source)


def _banner(text: str) -> dict:
    return {"cell_type": "markdown", "id": "workshop-banner", "metadata": {}, "source": text}


def student_notebook(nb: dict, name: str = "notebook") -> dict:
    """A student copy of ``nb``: solution regions stubbed, outputs and execution counts cleared."""
    exercise_cells(nb, name)
    out = copy.deepcopy(nb)
    for i, cell in enumerate(out["cells"]):
        if cell.get("cell_type") != "code":
            continue
        if TAG in cell.get("metadata", {}).get("tags", []):
            cell["source"] = strip_solutions(_source(cell), _where(name, i, cell))
        cell["outputs"], cell["execution_count"] = [], None
    n = len(exercise_cells(nb, name))
    if n:
        out["cells"].insert(0, _banner(
            f"*Student copy.* {n} exercise cell(s) below say `your code here`: replace that line with your "
            "answer, run the cell, then the check cell under it, which says what is off until your answer is "
            "right. Until you answer, the check says so and hands the worked answer to the cells after it, so "
            "\"Run All\" runs the whole notebook."))
    return out


def solutions_notebook(nb: dict, name: str = "notebook") -> dict:
    """The source notebook with its outputs, under a banner that says it holds the solutions."""
    n = len(exercise_cells(nb, name))
    out = copy.deepcopy(nb)
    out["cells"].insert(0, _banner(f"*Solutions.* The {n} exercise cell(s) of this notebook with their worked "
                                   "answers (between `# BEGIN SOLUTION` and `# END SOLUTION`) and the outputs of a "
                                   "clean run."))
    return out


def _write(nb: dict, path: Path, src_dir: Path) -> None:
    import nbformat  # validates the copy as it writes it

    for cell in nb["cells"]:
        if cell.get("cell_type") == "code":
            cell["source"] = _rebase(_source(cell), src_dir, path.parent.resolve())
    nbformat.write(nbformat.from_dict(nb), str(path))


def build_workshop(notebooks: list[Path], out_dir: Path) -> dict[str, list[Path]]:
    """Write ``out_dir/student/<name>.ipynb`` for every notebook and ``out_dir/solutions/<stem>_solutions.ipynb``
    for each one with exercises; return the paths written, ``{"student": [...], "solutions": [...]}``.

    Every notebook is checked first, so a broken one writes nothing.

    Raises:
        NotebookConventionError: a notebook breaks the exercise convention (see the module docstring).
    """
    loaded = {Path(p): json.loads(Path(p).read_text()) for p in notebooks}
    pairs = {p: exercise_cells(nb, str(p)) for p, nb in loaded.items()}
    written: dict[str, list[Path]] = {"student": [], "solutions": []}
    for kind in written:
        (out_dir / kind).mkdir(parents=True, exist_ok=True)
    for path, nb in loaded.items():
        student = out_dir / "student" / path.name
        _write(student_notebook(nb, str(path)), student, path.parent.resolve())
        written["student"].append(student)
        if pairs[path]:
            solutions = out_dir / "solutions" / f"{path.stem}_solutions.ipynb"
            _write(solutions_notebook(nb, str(path)), solutions, path.parent.resolve())
            written["solutions"].append(solutions)
    return written

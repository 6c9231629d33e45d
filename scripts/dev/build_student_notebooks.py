"""Build the workshop's student copies and solutions notebooks from notebooks/ (peagle_lab.lab.student_copies).

Student copies (every notebook, outputs cleared, each exercise's solution replaced by
``raise NotImplementedError("your code here")``) go to ``OUT/student/``; the solutions
notebooks (each notebook with exercises, its worked answers and outputs) to
``OUT/solutions/``. A notebook that breaks the exercise convention stops the build with a
message naming the notebook and the cell. The convention is in the module's docstring and in
docs/workshop.md.

Usage (from the repository root):
    .venv/bin/python scripts/dev/build_student_notebooks.py [--out build/workshop] [notebooks/*.ipynb]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from peagle_lab.lab.student_copies import NotebookConventionError, build_workshop

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    p.add_argument("--out", type=Path, default=REPO / "build" / "workshop", help="default: build/workshop")
    args = p.parse_args(argv)
    paths = args.notebooks or sorted((REPO / "notebooks").glob("*.ipynb"))
    try:
        written = build_workshop(paths, args.out)
    except NotebookConventionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for kind, files in written.items():
        print(f"{kind}: {len(files)} notebook(s) in {args.out / kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Give every plotly figure in the committed notebooks a static PNG copy (peagle_lab.lab.static).

Run it after re-executing a notebook, so GitHub and nbviewer (which run no JavaScript) show
the figures; JupyterLab keeps showing the interactive ones. Needs kaleido (the notebook
extra) and a Chromium (``bash scripts/dev/install_browser.sh``).

Usage (from the repository root):
    .venv/bin/python scripts/dev/notebook_pngs.py [--force] [notebooks/*.ipynb]
    .venv/bin/python scripts/dev/notebook_pngs.py --check    # list figures without a copy; exit 1 if any
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from peagle_lab.lab.static import add_pngs_to_file, missing_pngs

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    p.add_argument("--check", action="store_true", help="only list the figures that lack a PNG copy")
    p.add_argument("--force", action="store_true", help="redraw copies that exist")
    args = p.parse_args(argv)
    paths = args.notebooks or sorted((REPO / "notebooks").glob("*.ipynb"))
    if args.check:
        bad = {str(path): missing_pngs(json.loads(path.read_text())) for path in paths}
        bad = {k: v for k, v in bad.items() if v}
        for path, cells in bad.items():
            print(f"{path}: figures without a PNG copy in cells {cells}")
        return 1 if bad else 0
    for path in paths:
        print(f"{path}: {add_pngs_to_file(path, force=args.force)} PNG copies added", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

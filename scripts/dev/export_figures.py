"""Export the figures of docs/concepts.md as PNG files (deterministic inputs only, no timings).

Each figure comes from ``peagle_lab.lab.figures`` on the worked examples of the notebooks, or on
committed results; it is written to HTML with plotly.js inlined and photographed by Debian's
Chromium through Playwright (the browser test's set-up: ``bash scripts/dev/install_browser.sh``).

Usage (from the repository root):
    .venv/bin/python scripts/dev/export_figures.py [--out docs/images] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from peagle_lab.bench.archive import latest
from peagle_lab.lab import figures
from peagle_lab.lab.layout import layout_toy_batch
from peagle_lab.verify import verify_greedy

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def concept_figures() -> dict:
    """name -> plotly figure, for docs/concepts.md."""
    # The verify example of notebook 1's what-if drafts, with toy token ids: the target would
    # say 7 3 5 2 9 0; request 0's drafts go wrong at position 2, request 1's all match.
    target_choice = torch.tensor([[7, 3, 5, 2, 9, 0], [4, 4, 8, 1, 6, 3]])
    drafts = torch.tensor([[7, 3, 6, 2, 9], [4, 4, 8, 1, 6]])
    logits = torch.nn.functional.one_hot(target_choice, 10).float()
    results = json.loads((latest("h200", "kernels") / "kernels.json").read_text())
    training = json.loads((latest("h200", "training") / "results.json").read_text())
    k_sweep = json.loads((latest("h200", "sweeps") / "bench.json").read_text())  # the full sweep: K 1-8 at c = 1 and 64
    return {
        "training_curves_h200": figures.learning_curve_figure(training),
        "acceptance_vs_k_h200": figures.acceptance_vs_k_figure(training),
        "k_scaling_chat_h200": figures.k_scaling_figure(k_sweep, "chat"),
        "k_scaling_code_h200": figures.k_scaling_figure(k_sweep, "code"),
        "draft_batch": figures.draft_batch_figure(layout_toy_batch([2, 3], k=3, backend="torch"),
                                                  title="the worked example: K=3, accepted [2, 3]"),
        "verify_outcome": figures.verify_outcome_figure(verify_greedy(logits, drafts), drafts),
        "kernels_h200": figures.kernel_benchmark_figure(results, dtype="bf16", mode="graph"),
    }


def export(figs: dict, out: Path, width: int = 1000) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": width, "height": 600}, device_scale_factor=1)
        for name, fig in figs.items():
            fig.update_layout(width=width)
            html = Path(tmp) / f"{name}.html"
            fig.write_html(str(html), include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
            page.goto(html.as_uri())
            page.wait_for_selector(".main-svg")
            png = out / f"{name}.png"
            page.locator(".js-plotly-plot").screenshot(path=str(png))
            written.append(png)
        browser.close()
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="export these figures only (e.g. k_scaling_chat_h200)")
    args = ap.parse_args()
    figs = concept_figures()
    unknown = sorted(set(args.only or ()) - set(figs))
    if unknown:
        ap.error(f"--only {' '.join(unknown)}: no such figure; the figures are {', '.join(figs)}")
    for path in export({k: v for k, v in figs.items() if not args.only or k in args.only}, args.out):
        print(path)


if __name__ == "__main__":
    main()

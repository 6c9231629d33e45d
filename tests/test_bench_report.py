"""The results index's K-scaling headline table (peagle_lab.bench.report.markdown_headline) and the block it is
written into."""
from __future__ import annotations

from pathlib import Path

import pytest

from peagle_lab.bench.archive import latest
from peagle_lab.bench.report import (README_BEGIN, README_END, headline_table, main, markdown_headline,
                                     replace_block)
from peagle_lab.bench.schema import BenchResult, BenchRow, read_json

ROOT = Path(__file__).resolve().parents[1]
K_SWEEP = latest("h200", "k_scaling") / "bench.json"
INDEX = ROOT / "docs/results/README.md"


def _row(method, k, c, tps, workload="chat", temperature=0.0, al=2.0):
    return BenchRow(method, k, c, workload, temperature, tps, 1.0, al if k else 1.0, [0.5] * k, 10 if k else 0, 5,
                    1.0, 0.1, 0.2, 128, step_ms=0.96 if not k else 1.2)


def test_the_results_index_carries_the_table_of_the_committed_k_sweep():
    """Stale? Run the command in the BEGIN marker of docs/results/README.md and commit that file."""
    page = INDEX.read_text()
    assert replace_block(page, README_BEGIN, README_END, markdown_headline(read_json(K_SWEEP))) == page


def test_headline_takes_each_method_at_its_best_k_and_orders_rows_by_concurrency():
    rows = [_row("baseline", 0, 64, 5000.0), _row("baseline", 0, 1, 1000.0),
            _row("eagle3", 3, 1, 1800.0, al=2.3), _row("eagle3", 7, 1, 1700.0, al=2.6),
            _row("peagle", 7, 1, 2160.0, al=2.65), _row("peagle", 3, 1, 2000.0),
            _row("peagle", 3, 64, 6000.0), _row("peagle", 7, 1, 9999.0, temperature=1.0)]
    text = markdown_headline(BenchResult({}, {}, rows))
    lines = text.splitlines()
    assert lines[2] == "| chat | 1 | 1000 (0.96 ms) | 1800 (3, 2.30) | 2160 (7, 2.65) | 1.20× | 2.16× |"
    assert lines[3] == "| chat | 64 | 5000 (0.96 ms) | — | 6000 (3, 2.00) | — | 1.20× |"  # no EAGLE-3 cell at c = 64
    assert len(lines) == 4  # temperature 1 rows stay out


def test_the_console_table_names_its_temperature_column_and_shows_plain_decoding_without_k():
    rows = [_row("baseline", 0, 1, 1000.0), _row("eagle3", 3, 1, 1800.0, al=2.3), _row("peagle", 7, 1, 2160.0, al=2.65),
            _row("baseline", 0, 1, 900.0, temperature=1.0), _row("peagle", 7, 1, 1500.0, temperature=1.0)]
    lines = headline_table(BenchResult({}, {}, rows)).splitlines()
    assert lines[0].split() == ["workload", "temperature", "c", "plain", "tok/s", "EAGLE-3", "tok/s", "P-EAGLE",
                                "tok/s", "P/E3", "P/plain"]
    assert lines[1].split() == ["chat", "0", "1", "1000", "1800", "(K=3,", "AL", "2.30)", "2160", "(K=7,", "AL",
                                "2.65)", "1.20×", "2.16×"]
    assert lines[2].split()[:4] == ["chat", "1", "1", "900"] and lines[2].split()[4] == "—"  # no EAGLE-3 at T = 1
    assert len({len(line) for line in lines}) == 1  # columns aligned


def test_readme_flag_rewrites_only_the_block_and_a_page_without_markers_is_an_error(tmp_path, capsys):
    page = tmp_path / "README.md"
    page.write_text(f"intro\n{README_BEGIN}\nold table\n{README_END}\nafter\n")
    assert main([str(K_SWEEP), "--readme", str(page)]) == 0
    text = page.read_text()
    assert text.startswith(f"intro\n{README_BEGIN}\n| workload | c |") and text.endswith(f"{README_END}\nafter\n")
    # the committed sweep's own table, whatever its figures (a landed sweep replaces them)
    assert "old table" not in text and markdown_headline(read_json(K_SWEEP)) in text
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    assert main([str(K_SWEEP), "--readme", str(bare)]) == 2
    assert "has no" in capsys.readouterr().err and bare.read_text() == "no markers\n"
    with pytest.raises(ValueError, match="BEGIN headline"):
        replace_block("x", README_BEGIN, README_END, "y")
    with pytest.raises(ValueError, match="block"):  # the end marker only before the begin marker
        replace_block(f"{README_END}\n{README_BEGIN}\n", README_BEGIN, README_END, "y")

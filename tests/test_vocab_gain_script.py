"""scripts/bench/vocab_gain.py: first-draft acceptance split by the old draft vocabulary (a tiny CPU run)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_vocab_gain_splits_first_draft_acceptance_by_the_old_vocabulary(tmp_path):
    """The old head can never be right where the target's token lies outside its vocabulary; the new one can.
    Steps split into inside and outside add up, and 'all' is their weighted mean."""
    out = tmp_path / "v.json"
    run = subprocess.run([sys.executable, "scripts/bench/vocab_gain.py", "--tiny", "--prompts", "4", "--max-new-tokens",
                          "16", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["old_vocabulary"] < doc["new_vocabulary"] and doc["commit"]
    for wl in doc["workloads"].values():
        for which in ("old", "new"):
            r = wl[which]
            inside, outside, every = r["inside_old_vocabulary"], r["outside_old_vocabulary"], r["all"]
            assert inside["steps"] + outside["steps"] == every["steps"] > 0
            hits = sum((p["acceptance"] or 0) * p["steps"] for p in (inside, outside))
            assert every["acceptance"] == pytest.approx(hits / every["steps"])
        assert wl["old"]["outside_old_vocabulary"]["acceptance"] in (0.0, None)  # never proposed, never accepted
    assert any((wl["new"]["outside_old_vocabulary"]["acceptance"] or 0) > 0 for wl in doc["workloads"].values())

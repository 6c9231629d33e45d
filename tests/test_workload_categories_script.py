"""scripts/bench/workload_categories.py: acceptance per chat category (a tiny CPU run)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}


def test_categories_add_up_to_the_overall_acceptance(tmp_path):
    out = tmp_path / "c.json"
    run = subprocess.run([sys.executable, "scripts/bench/workload_categories.py", "--tiny", "--prompts", "8",
                          "--max-new-tokens", "16", "--cases", "peagle:3", "eagle3:2", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["prompts"] == 8 and doc["commit"] and set(doc["cases"]) == {"peagle:3", "eagle3:2"}
    for case in doc["cases"].values():
        cats = case["categories"]
        assert len(cats) == 8  # the chat workload's first 8 prompts are one per category
        assert sum(c["num_drafts"] for c in cats.values()) == case["num_drafts"] > 0
        accepted = sum(c["num_accepted_tokens"] for c in cats.values())
        assert accepted == case["num_accepted_tokens"]
        assert case["acceptance_length"] == pytest.approx(1 + accepted / case["num_drafts"])
        for c in cats.values():
            assert c["acceptance_length"] == pytest.approx(1 + c["num_accepted_tokens"] / c["num_drafts"])
    assert any(c["num_accepted_tokens"] for case in doc["cases"].values() for c in case["categories"].values())


def test_a_bad_case_is_named():
    run = subprocess.run([sys.executable, "scripts/bench/workload_categories.py", "--tiny", "--cases", "medusa:3",
                          "--out", "/tmp/unused.json"], cwd=REPO, capture_output=True, text=True, timeout=120, env=ENV)
    assert run.returncode == 2 and "case 'medusa:3'" in run.stderr


def test_parse_case():
    spec = importlib.util.spec_from_file_location("workload_categories", REPO / "scripts/bench/workload_categories.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.parse_case("eagle3:4") == ("eagle3", 4)
    for bad in ("peagle", "peagle:0", "peagle:17", "baseline:3"):
        with pytest.raises(ValueError, match="METHOD:K"):
            mod.parse_case(bad)

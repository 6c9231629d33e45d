"""scripts/bench/workload_categories.py: acceptance per chat category (a tiny CPU run)."""
from __future__ import annotations

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
    from peagle_lab.config import parse_case

    assert parse_case("eagle3:4") == ("eagle3", 4) and parse_case("peagle:16") == ("peagle", 16)
    for bad in ("peagle", "peagle:0", "peagle:17", "baseline:3", "peagle:x"):
        with pytest.raises(ValueError, match=f"case '{bad}': expected METHOD:K"):
            parse_case(bad)


def workload_categories():
    from peagle_lab.testing import script_module

    return script_module("bench/workload_categories.py")


def tiny_data_folder(root: Path) -> Path:
    """A data folder whose held-out split has 3 'science' and 2 'code' prompts (ids of a 24-token vocabulary)."""
    from peagle_lab.train.data_files import Example, write_split

    examples = [Example(prompt=f"p{i}", source="magpie" if i < 3 else "code", group=f"g{i}", response="greedy",
                        input_ids=[1, 3 + i, 5, 7 + i, 9, 11], assistant_start=4, finished=True,
                        domain="science" if i < 3 else "")
                for i in range(5)]
    root.mkdir()
    entries = write_split(examples, root, "heldout", shard_rows=2)
    (root / "card.json").write_text(json.dumps({"shards": {"heldout": entries}}))
    return root


def test_held_out_prompts_join_as_categories_and_are_banded_by_target_confidence(tmp_path):
    data, out = tiny_data_folder(tmp_path / "data"), tmp_path / "c.json"
    run = subprocess.run([sys.executable, "scripts/bench/workload_categories.py", "--tiny", "--prompts", "4",
                          "--max-new-tokens", "12", "--cases", "peagle:3", "--data", str(data), "--data-prompts", "4",
                          "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    case = json.loads(out.read_text())["cases"]["peagle:3"]
    cats = case["categories"]
    # round-robin over the held-out domains: 2 code + 2 science of the 4 asked for, beside 4 chat categories
    assert cats["heldout/code"]["requests"] == cats["heldout/science"]["requests"] == 2
    assert len([c for c in cats if not c.startswith("heldout/")]) == 4
    assert all(0 < c["target_confidence"] <= 1 for c in cats.values())
    assert len(case["requests"]) == sum(c["requests"] for c in cats.values()) == 8
    bands = case["by_confidence"]
    assert sum(b["heldout"]["requests"] for b in bands) == 4 and sum(b["workload"]["requests"] for b in bands) == 4
    for b in bands:
        inside = [r["al"] for r in case["requests"]
                  if b["band"][0] <= r["target_confidence"] < b["band"][1] + 1e-4 and r["category"].startswith("heldout/")]
        assert b["heldout"]["mean_al"] == (pytest.approx(sum(inside) / len(inside)) if inside else None)


def test_target_confidence_is_the_mean_probability_of_the_given_tokens():
    import torch

    from peagle_lab.testing import tiny_target

    mod, target = workload_categories(), tiny_target(seed=2)
    prompt, output = [1, 4, 9, 2], [7, 7, 3]
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        probs = target(ids, torch.arange(7)[None], return_taps=False).logits[0].float().softmax(-1)
    want = sum(float(probs[3 + j, t]) for j, t in enumerate(output)) / 3  # row i predicts token i + 1
    assert mod.target_confidence(target, prompt, output) == pytest.approx(want, rel=1e-5)

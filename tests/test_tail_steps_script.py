"""scripts/bench/tail_steps.py: which requests set a static batch's step count (a tiny CPU run)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_tail_steps_accounts_for_every_request_and_the_batch_waits_for_the_slowest(tmp_path):
    out = tmp_path / "t.json"
    run = subprocess.run([sys.executable, "scripts/bench/tail_steps.py", "--tiny", "-c", "5", "--cases", "peagle:3",
                          "eagle3:2", "--max-new-tokens", "16", "--out", str(out)], cwd=REPO, capture_output=True,
                         text=True, timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                                      "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [(c["method"], c["k"]) for c in doc["cases"]] == [("peagle", 3), ("eagle3", 2)] and doc["commit"]
    for c in doc["cases"]:
        steps = c["steps"]
        assert len(steps) == 5 and c["batch_steps"] == c["max"] == max(steps)  # the slowest request sets the batch
        assert c["median"] <= c["p90"] <= c["max"] and c["slowest"][0]["steps"] == max(steps)
        assert all(1 <= s <= 15 for s in steps)  # 15 tokens after the prefill's: at least one a step
        # every drafted token of a request counted: 1 + (accepted drafts + 1 a step) = 16 tokens each
        assert c["acceptance_length"] > 1.0 or all(s == 15 for s in steps)


def test_tail_steps_rejects_a_bad_case():
    run = subprocess.run([sys.executable, "scripts/bench/tail_steps.py", "--tiny", "--cases", "medusa:3", "--out",
                          "/dev/null"], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and "'medusa:3': expected METHOD:K" in run.stderr


def test_request_steps_rebuilds_each_request_and_refuses_a_compacted_trace():
    import pytest

    from peagle_lab.engine import StepTrace
    from peagle_lab.testing import script_module

    mod = script_module("bench/tail_steps.py")
    s = lambda i, acc: StepTrace(i, 1.0, 0.0, 0.0, acc, 1)  # noqa: E731
    # three requests of 6 tokens: the first done in two steps, the third in one, the second in four
    trace = [s(0, (2, 0, 4)), s(1, (1, 0)), s(2, (0,)), s(3, (1,))]
    assert mod.request_steps(trace, 3, 6) == [2, 4, 1]
    with pytest.raises(ValueError, match="step 1: 1 counts for 2 requests still decoding"):
        mod.request_steps([s(0, (2, 0, 4)), s(1, (1,))], 3, 6)
    assert mod.tokens_past_eos([4, 2, 2, 9], {2}) == 2  # after the first EOS, a second one included

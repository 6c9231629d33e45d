"""scripts/gpu/engine_ab_session.sh on the CPU (SMOKE=1: tiny random target and heads): both engines' answers and the
suite stage run, each bench document names the commit whose package measured it, and bad input stops it at once."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "scripts/gpu/engine_ab_session.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("git") is None
                                or not (REPO / ".git").exists(), reason="needs bash, git and this repository's history")


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_both_engines_answer_side_by_side_and_each_document_names_its_commit(tmp_path):
    env = dict(os.environ, AB_PACK=str(tmp_path / "base.tgz"), SMOKE="1", OUT=str(tmp_path / "out"),
               TREES=str(tmp_path / "trees"), PYTHON=sys.executable, OMP_NUM_THREADS="1", SUITE_S="300",
               BASE_FLAGS="-k 1 2")
    parent = subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=REPO, capture_output=True, text=True)
    if parent.returncode != 0:
        pytest.skip("a shallow clone: HEAD has no parent here to pack")
    base = parent.stdout.strip()
    packed = _run(["--pack", "HEAD~1"], env)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    run = _run([], dict(env, PEAGLE_LAB_COMMIT="f" * 40))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    head_doc = json.loads((tmp_path / "out/head/answer_c64/bench.json").read_text())
    base_doc = json.loads((tmp_path / "out/base/answer_c64/bench.json").read_text())
    assert head_doc["run_info"]["commit"] == "f" * 40
    assert base_doc["run_info"]["commit"] == base  # read back from the archive, not from the tree that runs it
    assert {r["k"] for r in base_doc["rows"]} == {0, 1, 2} and {r["k"] for r in head_doc["rows"]} == {0, 1, 2, 3}
    assert json.loads((tmp_path / "out/stage_seconds.json").read_text()).keys() == {"head", "base", "suite"}


def test_bad_input_stops_before_any_work(tmp_path):
    env = dict(os.environ, AB_PACK=str(tmp_path / "base.tgz"), OUT=str(tmp_path / "out"), PYTHON=sys.executable)
    bad = _run(["--pack", "no-such-commit"], env)
    assert bad.returncode == 2 and "'no-such-commit' is not a commit here" in bad.stdout
    missing = _run([], env)
    assert missing.returncode == 2 and "run --pack BASE here first" in missing.stdout
    unknown = _run([], dict(env, SKIP="bsae"))
    assert unknown.returncode == 2 and "bsae" in unknown.stdout
    assert not (tmp_path / "out" / "head").exists()

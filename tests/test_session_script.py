"""scripts/gpu/train_heads_h200.sh end to end on the CPU (SMOKE=1: tiny random target, character tokenizer).

The GPU sessions run this script in the background for ~15 minutes of scarce device time, so a break in any
stage (data through StreamDecoder, training, throughput, evaluation, packaging) must show up here first.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_session_script_runs_every_stage_and_packages_the_heads(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, SMOKE="1", DEVICE="cpu", OUT=str(out), WORK=str(work), PYTHON=sys.executable,
               OMP_NUM_THREADS="1", NGPU="1", TRAIN_STEPS="4", TRAIN_EXTRA="--cod-ratio-min 0.3", SWEEP="1",
               OPENING_WEIGHT="13", BESIDE='test -f "$WORK/data/card.json" && echo beside ran; exit 3',
               RUNS="eagle3:1 peagle:1::--cod-ratio=0.6,--exclude-domains,writing")  # P-EAGLE: flags of its own
    run = subprocess.run(["bash", "scripts/gpu/train_heads_h200.sh"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # BESIDE ran after the data stage (the card existed), its failure is reported and does not fail the session
    assert (out / "beside.log").read_text() == "beside ran\n"
    assert "### beside (" in run.stdout and "): exit 3 in " in run.stdout
    results = json.loads((out / "results.json").read_text())
    pe = "peagle-1l-cod-ratio-0.6-exclude-domains-writing"
    assert set(results["heads"]) == {"eagle3-1l", pe}  # a run with FLAGS is named after them
    assert set(results["stage_seconds"]) >= {"data", "train", "bench", "eval"}
    assert "sweep" not in results["stage_seconds"]  # SMOKE skips the sweep: it needs the real model
    examples = {}
    for name, cod_ratio, left_out in (("eagle3-1l", 0.7, []), (pe, 0.6, ["writing"])):  # TRAIN_EXTRA reached
        summary = json.loads((work / "runs" / name / "summary.json").read_text())  # every run, FLAGS only their own
        assert "--cod-ratio-min 0.3" in summary["command"] and summary["config"]["cod_ratio_min"] == 0.3
        assert summary["config"]["cod_ratio"] == cod_ratio and summary["excluded_domains"] == left_out
        assert summary["steps"] == 4 and summary["config"]["time_budget_s"] is None  # TRAIN_STEPS, not a budget
        examples[name] = summary["train_examples"]
    assert examples[pe] < examples["eagle3-1l"]  # the data A/B: the same folder without its writing
    card = json.loads((work / "data" / "card.json").read_text())
    assert card["throughput"]["per_rank"][0]["phases"]["greedy"]["engine"]["prefills"] >= 1  # by StreamDecoder
    magpie = card["sources"]["magpie"]  # OPENING_WEIGHT reached the data stage: half the turns began with openings
    assert magpie["domains"]["openings"].startswith("openings:") and sum(magpie["by_domain"]["openings"].values()) == 32
    parts = sorted(out.glob("heads.tgz.part-*"))
    archive = tmp_path / "heads.tgz"
    archive.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(n.endswith(f"{pe}/config.json") for n in names)
    assert any(n.endswith(".safetensors") for n in names)
    # Again on the same data (SKIP_DATA=1) with the default length: a time budget per run, not a step count.
    env.pop("TRAIN_STEPS")
    env.update(SKIP_DATA="1", SKIP_BENCH="1", SWEEP="0", TRAIN_BUDGET_S="4", RUNS="peagle:1",
               OUT=str(tmp_path / "out2"))
    again = subprocess.run(["bash", "scripts/gpu/train_heads_h200.sh"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"SKIP_DATA=1: reusing {work}/data" in again.stdout
    summary = json.loads((work / "runs" / "peagle-1l" / "summary.json").read_text())
    assert summary["config"]["time_budget_s"] == 4.0 and summary["steps"] >= 1
    assert "--time-budget-s 4" in summary["command"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("knobs,says", [
    ({"RUNS": "peagle:1 peagle:1"}, "two runs named peagle-1l"),
    ({"RUNS": "peagle:one"}, "layers 'one' in 'peagle:one' is not a positive integer"),
    ({"RUNS": "medusa:1"}, "unknown method 'medusa'"),
    ({"TRAIN_STEPS": "1e3"}, "TRAIN_STEPS='1e3' is not a positive integer"),
])
def test_a_bad_knob_stops_the_session_before_the_data_stage(tmp_path, knobs, says):
    env = dict(os.environ, SMOKE="1", DEVICE="cpu", OUT=str(tmp_path / "out"), WORK=str(tmp_path / "work"),
               PYTHON=sys.executable, NGPU="1", **knobs)
    run = subprocess.run(["bash", "scripts/gpu/train_heads_h200.sh"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and says in run.stdout
    assert not (tmp_path / "work" / "data").exists()  # no device time spent on data


# ---------------------------------------------------------------- sweep_session_h200.sh (the benchmark session)

SWEEP_SCRIPTS = ("sweep_session_h200.sh", "stage_lib.sh", "bench_h200.sh", "scale_lab_gpu.sh", "gpu_tests.sh")


def _sweep_session(tmp_path, fail_match="", skip="", bench_flags="", on_bench="", heads=True, **knobs):
    """Run a copy of sweep_session_h200.sh and the scripts it calls beside a stand-in python, which logs its arguments
    (and its working folder to CALLS.cwd), fails on FAIL_MATCH, runs ON_BENCH in each bench call, and answers doctor
    with whether the shipped EAGLE-3 head's weights are where it runs."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "gpu").mkdir(parents=True)
    for name in SWEEP_SCRIPTS:
        shutil.copy(REPO / "scripts" / "gpu" / name, repo / "scripts" / "gpu")
    for m in ("eagle3", "peagle"):  # as in a tree whose heads' weights travel in the bundle, when not heads
        (repo / "peagle_lab" / "heads" / m).mkdir(parents=True)
        (repo / "peagle_lab" / "heads" / m / ("model.safetensors" if heads else "config.json")).write_bytes(b"")
    fake = tmp_path / "python"
    fake.write_text('#!/bin/bash\necho "$*" >> "$CALLS"\necho "$PWD" >> "$CALLS.cwd"\n'
                    '[ -n "$FAIL_MATCH" ] && [[ "$*" == *"$FAIL_MATCH"* ]] && exit 3\n'
                    '[[ "$*" == *"peagle_lab.bench.cli"* ]] && eval "$ON_BENCH"\n'
                    '[[ "$*" == *"doctor --json"* ]] && { [ -f peagle_lab/heads/eagle3/model.safetensors ] \\\n'
                    '  && echo "{\\"heads\\": true}" || echo "{\\"heads\\": false}"; }\n'
                    '[ "$1 $2 $3" = "-m peagle_lab.bench.scale --out" ] && echo "{}" > "$4"\nexit 0\n')
    fake.chmod(0o755)
    model = tmp_path / "cache" / "models" / "SmolLM2-135M-Instruct"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"")  # bench_h200.sh only checks that the model is staged
    out, calls = tmp_path / "out", tmp_path / "calls.log"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "PYTHON": str(fake), "CALLS": str(calls), "FAIL_MATCH": fail_match,
           "PEAGLE_LAB_CACHE": str(tmp_path / "cache"), "PEAGLE_LAB_COMMIT": "c0ffee", "SKIP": skip,
           "BENCH_FLAGS": bench_flags, "ON_BENCH": on_bench, "SNAPSHOT": str(tmp_path / "snap"),
           "VLLM_STAGE_ROOT": str(tmp_path / "stage"), **knobs}
    run = subprocess.run(["bash", str(repo / "scripts" / "gpu" / "sweep_session_h200.sh")], capture_output=True,
                         text=True, timeout=60, env=env)
    return run, out, calls.read_text().splitlines() if calls.exists() else []


def _benches(calls):
    return [c for c in calls if c.startswith("-m peagle_lab.bench.cli")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sweep_session_runs_the_answer_stages_then_the_scale_lab_the_suite_and_doctor(tmp_path):
    run, out, calls = _sweep_session(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    code, mt = _benches(calls)
    for bench, w in ((code, "code"), (mt, "mt_bench")):
        assert f"--out {out}/answer_length/{w}" in bench
        # bench_h200.sh's own flags first, the answer-length flags after them, so they win
        assert bench.index("--ignore-eos") < bench.index("--stop-at-eos")
        assert bench.endswith(f"--workloads {w} --time-budget-s {330 if w == 'code' else 360}")
        assert "-k 1 2 3 4 5 6 7 8 --extra-k -c 64 1 --max-new-tokens 1024" in bench and "--min-prompts 32" in bench
    order = [next(i for i, c in enumerate(calls) if c.startswith(p)) for p in
             ("-m peagle_lab.bench.cli", "-m peagle_lab.bench.scale", "-m pytest -m gpu", "-m peagle_lab.cli doctor")]
    assert order == sorted(order)
    assert json.loads((out / "doctor.json").read_text()) == {"heads": True}
    stages = ["answer_code", "answer_mt_bench", "scale_lab", "suite", "doctor"]
    assert list(json.loads((out / "stage_seconds.json").read_text())) == stages
    log = (out / "sweep_session.log").read_text()
    assert f"commit c0ffee, running in {tmp_path / 'snap'}" in log and "### done in" in log
    assert set(Path(f"{tmp_path / 'calls.log'}.cwd").read_text().split()) == {str(tmp_path / "snap")}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sweep_session_keeps_going_past_a_failed_stage_and_runs_the_suite_only_with_time_left(tmp_path):
    run, out, calls = _sweep_session(tmp_path, fail_match="--workloads code")
    assert run.returncode == 1 and "failed: answer_code" in run.stdout
    assert len(_benches(calls)) == 2 and any(c.startswith("-m pytest -m gpu") for c in calls)
    bad, _, calls = _sweep_session(tmp_path / "b", skip="sweep")
    assert bad.returncode == 2 and "unknown stage 'sweep'" in bad.stdout and calls == []
    bad, _, calls = _sweep_session(tmp_path / "c", SESSION_BUDGET_S="9m")
    assert bad.returncode == 2 and "SESSION_BUDGET_S='9m'" in bad.stdout and calls == []
    run, out, calls = _sweep_session(tmp_path / "d", SESSION_BUDGET_S="100", SUITE_S="360")
    assert run.returncode == 0 and not any(c.startswith("-m pytest") for c in calls)
    assert "stage suite skipped" in run.stdout and "it needs SUITE_S=360" in run.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sweep_session_gives_bench_flags_to_both_answer_stages_last_so_they_win(tmp_path):
    """BENCH_FLAGS turns the session into a CPU rehearsal (the header's command): both answer stages must end with
    them, since a bench flag given twice takes its last value."""
    run, _, calls = _sweep_session(tmp_path, bench_flags="--device cpu -c 1 2 --max-new-tokens 4")
    assert run.returncode == 0, run.stdout + run.stderr
    benches = _benches(calls)
    assert len(benches) == 2 and all(b.endswith(" --device cpu -c 1 2 --max-new-tokens 4") for b in benches)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sweep_session_stops_before_any_stage_without_the_shipped_heads_and_takes_the_staged_copies(tmp_path):
    run, out, calls = _sweep_session(tmp_path, heads=False)
    assert run.returncode == 2 and "no weights in peagle_lab/heads/eagle3" in run.stdout and calls == []
    for m in ("eagle3", "peagle"):  # stage_vllm_h200.sh's whole copies, for jobs that outlive a call
        (tmp_path / "b" / "stage" / "heads" / m).mkdir(parents=True)
        (tmp_path / "b" / "stage" / "heads" / m / "model.safetensors").write_bytes(b"w")
    run, out, calls = _sweep_session(tmp_path / "b", heads=False, SKIP="answer_code answer_mt_bench scale_lab suite")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((out / "doctor.json").read_text()) == {"heads": True}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_later_call_that_copies_the_tree_without_weights_changes_nothing_under_the_sweep_session(tmp_path):
    """A later call on the GPU machine copies the tree again, without the heads' weights and perhaps with a newer
    script: the running session keeps its own code and heads to the end, doctor included."""
    repo = tmp_path / "repo"
    script = repo / "scripts" / "gpu" / "sweep_session_h200.sh"
    later_call = (f'rm -f {repo}/peagle_lab/heads/*/model.safetensors; '
                  f'{{ printf "#%.0s" $(seq 300); echo; cat "{script}"; }} > "{tmp_path}/new"; '
                  f'cat "{tmp_path}/new" > "{script}"')
    run, out, calls = _sweep_session(tmp_path, on_bench=later_call, SKIP="suite")
    assert run.returncode == 0 and "syntax error" not in run.stderr, run.stdout + run.stderr
    assert script.read_text().startswith("#" * 300) and not list(repo.rglob("*.safetensors"))
    assert json.loads((out / "doctor.json").read_text()) == {"heads": True}

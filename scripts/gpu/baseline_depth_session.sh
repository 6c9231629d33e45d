#!/usr/bin/env bash
# The baseline's strength as an experiment, one background job on one GPU (H100 or H200) in about 15 minutes: how
# P-EAGLE's lead over EAGLE-3 depends on how deep the EAGLE-3 baseline was trained (its training-time test, TTT: an
# EAGLE-3 head trained with SHALLOW_K steps beside the shipped one's 7, both measured against the shipped P-EAGLE).
#   1 answer_c64  answers decoded to EOS (at most 1,024 tokens) on HumanEval at c = 64, batched continuously (rows
#                 refilled, 4 x 64 requests a cell, every step ~64 rows, as vLLM serves): baseline, EAGLE-3 and P-EAGLE
#                 at K 1-8 with the shipped heads; --time-budget-s ANSWER_BUDGET_S (150), cut at ANSWER_LIMIT_S (180)
#                 → $OUT/answer_c64/ (bench.json, written after every cell, bench.csv, bench.log)
#   2 stream      the command in STREAM_CMD (skipped when empty), cut at STREAM_LIMIT_S (120); inside it $OUT is
#                 $OUT/stream → $OUT/stream/ (stream.log and what it writes)
#   3 train       scripts/gpu/train_heads_h200.sh: fresh data from the same generator (seed 12, DATA_BUDGET_S), one
#                 EAGLE-3 head trained with a TTT of SHALLOW_K (3) steps in the shipped head's recipe (warm start from the
#                 shipped EAGLE-3 head, 900 steps, lr 3e-4, WSD with decay 0.5, top-1 weight 0.5, seed 12, batch 16 x
#                 2048), then the shallow head, the shipped EAGLE-3 (TTT 7) and the shipped P-EAGLE evaluated on the same
#                 prompts (held-out, chat, code: AL at K 1-8 and acceptance per position) in one process
#                 → $OUT/train/ (results.json, experiment.json, logs, each head's summary.json; no weights)
#                 The GPU suite (scripts/gpu/gpu_tests.sh) runs beside this stage from its start, cut at
#                 SESSION_BUDGET_S (900) from the session's start → $OUT/gpu_suite/
# Every stage runs even when one before it failed; stage seconds go to $OUT/stage_seconds.json; exit 1 if any failed.
# The job first copies the tree to SNAPSHOT (/tmp/baseline_depth_repo) and runs there, so the tree that later calls
# copy over the repository cannot change the code under a running job. Read the results with
#   python -m peagle_lab.lab.baseline_depth_report FETCHED_FOLDER      (tables; peagle_lab.lab.baseline_depth's figure)
#
# Launch on an offline GPU machine (docs/scripts.md, "Running on an offline GPU machine"). Here, once:
#   bash scripts/gpu/vllm_bundle.sh --no-vllm       # .stage/vllm/p00, p01, ...: the GGUF, the heads, .whl's wheels
#   bash scripts/gpu/vllm_bundle.sh --aside         # the heads' weights out of the tree that travels (--restore after)
# There, one call per part, each carrying its part (carry .stage/vllm/pNN), within 30 s of each other:
#   source scripts/gpu/stage_vllm_h200.sh
# and in the call that carries the last part (480 s of waiting there: the staging takes part of the call's 600 s):
#   source scripts/gpu/stage_vllm_h200.sh; [ "$BUNDLE_STAGED" = 1 ] || exit 1; setsid nohup bash -c 'OUT=/tmp/pipeline_out
#   PEAGLE_LAB_COMMIT=SHA bash scripts/gpu/baseline_depth_session.sh; echo $? > /tmp/pipeline.rc' > /tmp/pipeline.log 2>&1 &
#   sleep 2; bash scripts/gpu/h200_wait.sh 480
# then `bash scripts/gpu/h200_wait.sh 540` in the next calls until it reports the exit status, and
# `bash scripts/gpu/h200_wait.sh 0` until it says every output is fetched (answer_c64.tgz, train.tgz, gpu_suite.tgz, ...).
# STREAM_CMD goes inside the quotes, its $OUT escaped so that it means the stage's folder: STREAM_CMD="python3 ... \$OUT/x".
#
# Knobs (environment): PYTHON, WORK (/tmp/peagle_train, where h200_wait.sh looks), SKIP (stage names: answer_c64,
# stream, train, suite), ANSWER_FLAGS (more bench flags, last so they win), SHALLOW_K (3), SHALLOW_INIT (the shipped
# EAGLE-3 head; "none" trains from scratch, give LR then, e.g. 1e-3 as the shipped head's first run), TRAIN_STEPS (900),
# LR (3e-4), SEED (12), SHIPPED_EAGLE3 / SHIPPED_PEAGLE (peagle_lab/heads/eagle3 and peagle), DATA_BUDGET_S (unset: what
# SESSION_BUDGET_S leaves once the stages before it and TRAIN_EVAL_S (420: training and evaluation on an H100, estimated)
# are taken off, at most 150 and at least 60 seconds),
# EVAL_WORKLOAD_KS (1,2,3,4,5,6,7,8: the K values evaluated on chat and code; 3,7,8 saves about a minute).
# The shipped EAGLE-3 head was warm-started from earlier runs (5,567 steps in all, its summary.json's "cumulative");
# warm-starting the shallow head from it matches that recipe's last run, so the comparison isolates the last 900 steps'
# TTT depth; SHALLOW_INIT=none gives a head with the shallow TTT from its first step but 900 steps of training only.
# A CPU rehearsal (tiny random target, tiny stand-in heads trained first by the same script; a few minutes):
#   SMOKE=1 OUT=/tmp/bd_smoke PYTHON=$PWD/.venv/bin/python OMP_NUM_THREADS=1 STREAM_CMD='echo hi > $OUT/hi.txt' \
#   timeout 1500 bash scripts/gpu/baseline_depth_session.sh
set -uo pipefail
# The whole job is one function, read in full before it starts, and the line that calls it exits: a later call that
# copies the tree over this file cannot change what a running job does (the rest runs from the snapshot).
main() {
cd "$(dirname "$0")/../.."
source scripts/gpu/stage_lib.sh  # session_paths, whole_numbers, known_stages, session_start, shipped_heads, stage, stages_done
session_paths || exit 2
SMOKE=${SMOKE:-0}
WORK=${WORK:-${TMPDIR:-/tmp}/peagle_train}
SESSION_BUDGET_S=${SESSION_BUDGET_S:-900} SHALLOW_K=${SHALLOW_K:-3}
whole_numbers SESSION_BUDGET_S SHALLOW_K ANSWER_BUDGET_S ANSWER_LIMIT_S STREAM_LIMIT_S DATA_BUDGET_S TRAIN_STEPS TRAIN_EVAL_S || exit 2
known_stages answer_c64 stream train suite || exit 2
export PEAGLE_LAB_COMMIT=${PEAGLE_LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
SNAP=${SNAPSHOT:-/tmp/baseline_depth_repo}
session_start "$SNAP" baseline_depth_session.log || exit 2
echo "### baseline_depth_session.sh at $(date -u +%FT%TZ), commit $PEAGLE_LAB_COMMIT, running in $SNAP"
# The shipped heads' weights travel in the bundle, not the tree: stage_vllm_h200.sh puts them back (and keeps copies in
# /tmp/heads, where shipped_heads finds them).
[ "$SMOKE" = 1 ] || shipped_heads || exit 2

# ---------------------------------------------------------------- 1 answer_c64
if [ "$SMOKE" = 1 ]; then  # the tiny random target and random tiny heads (--tiny takes no head flags)
  ANSWER=(--tiny --device cpu --dtype float32 -k 1 2 3 -c 4 --continuous 1 --max-new-tokens 8)
else
  ANSWER=(--device cuda --dtype bfloat16 -k 1 2 3 4 5 6 7 8 -c 64 --continuous 4 --max-new-tokens 1024)
fi
answer() {  # the shipped heads (the bench's default: peagle_lab/heads), bench.json rewritten after every cell
  mkdir -p "$OUT/answer_c64"
  # shellcheck disable=SC2086
  timeout "${ANSWER_LIMIT_S:-180}" "$PY" -m peagle_lab.bench.cli --methods baseline eagle3 peagle "${ANSWER[@]}" \
    --extra-k --workloads code --stop-at-eos --no-reference --time-budget-s "${ANSWER_BUDGET_S:-150}" --no-report \
    --out "$OUT/answer_c64" ${ANSWER_FLAGS:-} 2>&1 | tee "$OUT/answer_c64/bench.log"
  return "${PIPESTATUS[0]}"
}
stage answer_c64 answer

# ---------------------------------------------------------------- 2 stream
stream() {
  mkdir -p "$OUT/stream"
  OUT="$OUT/stream" timeout "${STREAM_LIMIT_S:-120}" bash -c "$STREAM_CMD" 2>&1 | tee "$OUT/stream/stream.log"
  return "${PIPESTATUS[0]}"
}
if [ -n "${STREAM_CMD:-}" ]; then stage stream stream; else echo "### stage stream skipped (STREAM_CMD is empty)"; fi

# ---------------------------------------------------------------- 3 train (and the GPU suite beside it)
SHIPPED_GIVEN=${SHIPPED_EAGLE3:+1}${SHIPPED_PEAGLE:+1}
SHIPPED_EAGLE3=${SHIPPED_EAGLE3:-$SNAP/peagle_lab/heads/eagle3} SHIPPED_PEAGLE=${SHIPPED_PEAGLE:-$SNAP/peagle_lab/heads/peagle}
TRAIN_ENV=(SKIP_BENCH=1 EVAL_TOGETHER=1 PACK_HEADS=0 EVAL_KS=1,2,3,4,5,6,7,8
           WORKLOAD_KS="${EVAL_WORKLOAD_KS:-1,2,3,4,5,6,7,8}")
if [ "$SMOKE" = 1 ]; then
  TRAIN_ENV+=(SMOKE=1 DEVICE=cpu NGPU=1 EVAL_WORKLOADS=chat,code TRAIN_STEPS="${TRAIN_STEPS:-4}")
  [ -z "${DATA_BUDGET_S:-}" ] || TRAIN_ENV+=(DATA_BUDGET_S="$DATA_BUDGET_S")
else
  TRAIN_ENV+=(TRAIN_STEPS="${TRAIN_STEPS:-900}")
fi
standins() {  # SMOKE without SHIPPED_*: tiny heads in the shipped recipe's TTT depth (7), trained by the same script
  [ "$SMOKE" = 1 ] && [ -z "$SHIPPED_GIVEN" ] || return 0
  env OUT="$WORK/standins/out" WORK="$WORK/standins" SMOKE=1 DEVICE=cpu NGPU=1 RUNS="eagle3:1 peagle:1" TRAIN_STEPS=2 \
    DATA_BUDGET_S=20 SKIP_BENCH=1 PACK_HEADS=0 EVAL_KS=3 bash scripts/gpu/train_heads_h200.sh > "$OUT/train/standins.log" 2>&1 \
    || { echo "the tiny stand-in heads failed (see train/standins.log)"; return 1; }
  SHIPPED_EAGLE3=$WORK/standins/ship/heads/eagle3-1l SHIPPED_PEAGLE=$WORK/standins/ship/heads/peagle-1l
}
experiment() {  # what the shallow head is, written before training so that a failed run still says it
  local init=$1
  cat > "$OUT/train/experiment.json" <<EOF
{
  "experiment": "EAGLE-3 with a shallow training-time test beside the shipped heads: P-EAGLE's lead against the baseline's TTT depth",
  "shallow_k_train": $SHALLOW_K,
  "shallow_init": "${init:-none (from scratch)}",
  "shipped_eagle3": "$SHIPPED_EAGLE3",
  "shipped_peagle": "$SHIPPED_PEAGLE",
  "shipped_heads": ["eagle3-ttt7", "peagle"],
  "recipe": "train_heads_h200.sh: RUNS='$RUNS' TRAIN_EXTRA='$TRAIN_EXTRA' LR=$LR SEED=$SEED ${TRAIN_ENV[*]}",
  "data": "fresh from the same generator as the shipped heads' (train_heads_h200.sh's data stage, seed $SEED, a data budget of $DATA_S s), not the shipped head's exact tokens",
  "commit": "$PEAGLE_LAB_COMMIT"
}
EOF
}
collect() {  # results, logs and every head's summary (never weights) into $OUT/train
  local tout=$1 ship=$WORK/ship d n
  for f in "$tout/results.json" "$tout/train_heads_h200.log" "$ship/stage_seconds.json" "$ship/eval-all.log" \
           "$ship/data/card.json" "$ship/data/card.md"; do
    [ -f "$f" ] && cp "$f" "$OUT/train/"
  done
  for d in "$ship"/runs/*/ "$ship"/heads/*/; do
    [ -d "$d" ] || continue
    n=$(basename "$(dirname "$d")")/$(basename "$d")
    mkdir -p "$OUT/train/$n"
    for f in "$d"*.json "$d"*.jsonl "$d"*.log "$d"README.md; do
      case $f in *.safetensors*|*/model.safetensors.index.json) continue ;; esac
      [ -f "$f" ] && cp "$f" "$OUT/train/$n/"
    done
  done
  du -sh "$OUT/train"
}
train() {
  mkdir -p "$OUT/train"
  standins || return 1
  local init=${SHALLOW_INIT-$SHIPPED_EAGLE3}
  TRAIN_EXTRA="--decay-fraction 0.5 --top1-weight 0.5"
  [ "$init" = none ] && init=""
  # from scratch: the shipped head's vocabulary (a warm start keeps its own)
  [ -n "$init" ] || [ "$SMOKE" = 1 ] || TRAIN_EXTRA="$TRAIN_EXTRA --draft-vocab-size 32768"
  RUNS="eagle3:1:$init:--k-train=$SHALLOW_K" LR=${LR:-3e-4} SEED=${SEED:-12}
  DATA_S=${DATA_BUDGET_S:-60}  # SMOKE: the training script's own default
  if [ "$SMOKE" != 1 ]; then  # the data stage gets what the session's budget leaves, so the whole job fits
    local fit=$((SESSION_BUDGET_S - SECONDS - ${TRAIN_EVAL_S:-420} - 30))
    DATA_S=${DATA_BUDGET_S:-$((fit > 150 ? 150 : (fit < 60 ? 60 : fit)))}
    TRAIN_ENV+=(DATA_BUDGET_S="$DATA_S")
  fi
  experiment "$init"
  rm -rf "$WORK/train_out"
  env "${TRAIN_ENV[@]}" OUT="$WORK/train_out" WORK="$WORK" RUNS="$RUNS" TRAIN_EXTRA="$TRAIN_EXTRA" LR="$LR" SEED="$SEED" \
    EVAL_HEADS="eagle3-ttt7=$SHIPPED_EAGLE3 peagle=$SHIPPED_PEAGLE" bash scripts/gpu/train_heads_h200.sh
  local rc=$?
  collect "$WORK/train_out"
  return $rc
}
suite() {  # the GPU suite beside the train stage, cut where the session's budget ends
  local left=$((SESSION_BUDGET_S - SECONDS))
  [ "$left" -ge 60 ] || { echo "### suite skipped: ${left}s left of SESSION_BUDGET_S=$SESSION_BUDGET_S"; return 0; }
  echo "### suite beside the train stage, for at most ${left}s → \$OUT/gpu_suite"
  ( s=$SECONDS; rc=0; timeout "$left" bash scripts/gpu/gpu_tests.sh "$OUT/gpu_suite" > "$OUT/gpu_suite.log" 2>&1 || rc=$?
    echo "### suite: exit $rc in $((SECONDS - s))s$([ "$rc" = 124 ] && echo ", cut at the session's budget")" ) &
  SUITE_PID=$!
}
SUITE_PID=""
case " ${SKIP:-} " in *" suite "*) echo "### suite skipped (SKIP)" ;; *) suite ;; esac
stage train train
[ -z "$SUITE_PID" ] || wait "$SUITE_PID"

stages_done
}
main "$@"; exit  # on one line: bash reads no further in this file once main returns

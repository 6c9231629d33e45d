#!/usr/bin/env bash
# One training session on the H200 machine (1 or 2 GPUs), offline, in about 20 minutes:
#   1 data     self-distilled by our engine on every GPU (torchrun, sharded by rank), ≥ 70 % greedy
#   2 train    EAGLE-3 and P-EAGLE, each alone on its own GPU for the same wall-clock budget (with
#              one GPU: one after the other, half the budget each); WSD schedule, learning curve
#   3 bench    training throughput per method (peagle_lab.train.bench) → throughput.json, after
#              training so that inductor's disk cache already holds the compiled step
#   4 eval     acceptance per K and per position with the real engine: held-out prompts, and the
#              chat / code benchmark workloads that no training saw; heads exported in bf16
#   5 package  results.json (goals, curves, throughput), heads + logs → $OUT/heads.tgz.part-N (≤ 15 MiB)
#
# Needs $OUT and the converted model ($PEAGLE_LAB_CACHE/models/SmolLM2-135M-Instruct; see
# scripts/stage_h200.sh). Knobs (environment): PYTHON, WORK, SEED, DATA_TOKENS (40000000),
# DATA_BUDGET_S (220), TRAIN_BUDGET_S (450), NUM_MAGPIE (48000), ROW_LEN (2048), BATCH (16 rows a GPU), LR (1e-3),
# PEAGLE_LAYERS (1), INIT_EAGLE3 / INIT_PEAGLE (warm-start head folders), EVAL_KS, SKIP_BENCH=1.
# SMOKE=1 DEVICE=cpu runs every stage on the tiny random target in a few minutes (checks this script).
# Reassemble:  cat heads.tgz.part-* | tar -xzf -
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
OUT=${OUT:?set OUT to the output folder}
WORK=${WORK:-${TMPDIR:-/tmp}/peagle_train}
SEED=${SEED:-0}
DEVICE=${DEVICE:-cuda}
if [ "${SMOKE:-0}" = 1 ]; then
  TGT=(--tiny); DATA=(--num-magpie 64 --max-code-prompts 16 --max-math-prompts 16 --max-writing-prompts 16
                      --response-max-tokens 24 --concurrency 64 --heldout-fraction 0.25)
  DATA_TOKENS=${DATA_TOKENS:-20000}; DATA_BUDGET_S=${DATA_BUDGET_S:-60}; TRAIN_BUDGET_S=${TRAIN_BUDGET_S:-25}
  ROW_LEN=${ROW_LEN:-256}; BATCH=${BATCH:-4}; VOCAB=64; EVAL=(--eval-prompts 4 --eval-max-new-tokens 16
  --concurrency 4); WL=(); EVAL_KS=${EVAL_KS:-1,3,7}; BENCH_STEPS=2; NGPU=${NGPU:-2}
else
  CACHE=${PEAGLE_LAB_CACHE:?set PEAGLE_LAB_CACHE (the converted model lives in \$PEAGLE_LAB_CACHE/models)}
  MODEL=${MODEL:-$CACHE/models/SmolLM2-135M-Instruct}
  [ -f "$MODEL/config.json" ] || { echo "no model folder at $MODEL (source scripts/stage_h200.sh first)"; exit 2; }
  TGT=(--model "$MODEL"); DATA=(--num-magpie ${NUM_MAGPIE:-48000} --max-code-prompts 4096 --max-math-prompts 8000
                               --max-writing-prompts 8000 --response-max-tokens 320 --concurrency 1024
                               --heldout-fraction 0.01)
  DATA_TOKENS=${DATA_TOKENS:-40000000}; DATA_BUDGET_S=${DATA_BUDGET_S:-220}; TRAIN_BUDGET_S=${TRAIN_BUDGET_S:-450}
  ROW_LEN=${ROW_LEN:-2048}; BATCH=${BATCH:-16}; VOCAB=8192; EVAL=(--eval-prompts 96 --eval-max-new-tokens 128
  --concurrency 96); WL=(--workloads chat,code); EVAL_KS=${EVAL_KS:-1,2,3,4,5,6,7,8}; BENCH_STEPS=4
  NGPU=$(nvidia-smi -L | wc -l)
fi
LR=${LR:-1e-3}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} PEAGLE_LAB_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
mkdir -p "$OUT" "$WORK/ship/heads" "$WORK/ship/runs" "$WORK/ship/data"
exec > >(tee -a "$OUT/train_heads_h200.log") 2>&1

T0=$SECONDS
STAGES=""
mark() { local s=$((SECONDS - $2)); STAGES="$STAGES\"$1\": $s, "; echo "### stage $1 took ${s}s (total $((SECONDS - T0))s)"; }
gpu() { if [ "$DEVICE" = cpu ]; then echo ""; else echo "$1"; fi; }  # CUDA_VISIBLE_DEVICES value

echo "### peagle_lab train_heads_h200.sh on $(hostname) at $(date -u +%FT%TZ): $NGPU device(s), work dir $WORK"
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
echo "commit ${PEAGLE_LAB_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"

# ---------------------------------------------------------------- 1 data (every GPU, torchrun)
t=$SECONDS
EXCL=()
for f in "$REPO"/peagle_lab/bench/data/*.jsonl "$REPO"/peagle_lab/bench/data/*.txt; do [ -f "$f" ] && EXCL+=(--exclude-file "$f"); done
[ "${SKIP_DATA:-0}" = 1 ] && [ -f "$WORK/data/card.json" ] && echo "SKIP_DATA=1: reusing $WORK/data" || \
"$PY" -m torch.distributed.run --nproc-per-node "$NGPU" --master-port 29511 -m peagle_lab.train.cli data \
  "${TGT[@]}" --device "$DEVICE" --out "$WORK/data" "${DATA[@]}" --target-tokens "$DATA_TOKENS" \
  --time-budget-s "$DATA_BUDGET_S" --seed "$SEED" --no-progress "${EXCL[@]}"
cp "$WORK/data/card.json" "$WORK/data/card.md" "$WORK/ship/data/"
mark data $t

# ---------------------------------------------------------------- 2 train (each head alone on a GPU)
t=$SECONDS
COMMON=("${TGT[@]}" --device "$DEVICE" --batch-size "$BATCH" --row-len "$ROW_LEN" --draft-vocab-size $VOCAB --seed "$SEED")
TRAIN=("${COMMON[@]}" --data "$WORK/data" --lr "$LR" --schedule wsd --warmup-fraction 0.03 --decay-fraction 0.25
       --log-every 50 --ckpt-every 500 --eval-every 250 --heldout-rows 32 --no-eval --no-progress)
if [ "$NGPU" -gt 1 ] || [ "$DEVICE" = cpu ]; then BUDGET=$TRAIN_BUDGET_S; else BUDGET=$((TRAIN_BUDGET_S / 2)); fi
run_train() {  # run_train METHOD GPU EXTRA...
  local m=$1 g=$2; shift 2
  CUDA_VISIBLE_DEVICES=$(gpu "$g") TORCH_LOGS=recompiles "$PY" -m peagle_lab.train.cli train --method "$m" --out "$WORK/runs/$m" \
    "${TRAIN[@]}" --time-budget-s "$BUDGET" "$@" > "$WORK/train-$m.log" 2>&1
}
E3=(--layers 1 ${INIT_EAGLE3:+--init-from "$INIT_EAGLE3"})
PE=(--layers "${PEAGLE_LAYERS:-1}" ${INIT_PEAGLE:+--init-from "$INIT_PEAGLE"})
FAIL=0
if [ "$NGPU" -gt 1 ]; then
  run_train eagle3 0 "${E3[@]}" & P0=$!
  run_train peagle 1 "${PE[@]}" & P1=$!
  wait $P0 || { echo "training eagle3 failed"; FAIL=1; }
  wait $P1 || { echo "training peagle failed"; FAIL=1; }
else
  run_train eagle3 0 "${E3[@]}" || { echo "training eagle3 failed"; FAIL=1; }
  run_train peagle 0 "${PE[@]}" || { echo "training peagle failed"; FAIL=1; }
fi
for m in eagle3 peagle; do echo "----- $m -----"; grep -v "^\s*$" "$WORK/train-$m.log" | tail -25; done
[ "$FAIL" = 0 ] || exit 1
mark train $t

# ---------------------------------------------------------------- 3 training throughput (warm compile cache)
t=$SECONDS
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  CUDA_VISIBLE_DEVICES=$(gpu 0) "$PY" -m peagle_lab.train.bench "${COMMON[@]}" --data "$WORK/data" --methods eagle3 \
    --steps $BENCH_STEPS --warmup 2 --out "$WORK/bench-eagle3.json" > "$WORK/bench-eagle3.log" 2>&1 & B0=$!
  CUDA_VISIBLE_DEVICES=$(gpu $((NGPU > 1 ? 1 : 0))) "$PY" -m peagle_lab.train.bench "${COMMON[@]}" --data "$WORK/data" \
    --methods peagle --layers "${PEAGLE_LAYERS:-1}" --steps $BENCH_STEPS --warmup 2 --out "$WORK/bench-peagle.json" \
    > "$WORK/bench-peagle.log" 2>&1 & B1=$!
  wait $B0 || echo "bench eagle3 failed (training goes on)"; wait $B1 || echo "bench peagle failed (training goes on)"
  cat "$WORK/bench-eagle3.log" "$WORK/bench-peagle.log" | grep -v "^\s*$" | tail -20
  "$PY" - "$WORK" "$WORK/ship/throughput.json" <<'PYEOF'
import json, sys
from pathlib import Path
work, out = Path(sys.argv[1]), Path(sys.argv[2])
docs = [json.loads(p.read_text()) for p in sorted(work.glob("bench-*.json"))]
if docs:
    doc = dict(docs[0], results=[r for d in docs for r in d["results"]],
               command=" ; ".join(d["command"] for d in docs), layout="one method per GPU, run side by side")
    out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
PYEOF
fi
mark bench $t

# ---------------------------------------------------------------- 4 eval + export
t=$SECONDS
run_eval() {  # run_eval METHOD GPU
  CUDA_VISIBLE_DEVICES=$(gpu "$2") "$PY" -m peagle_lab.train.cli eval "${TGT[@]}" --device "$DEVICE" --data "$WORK/data" \
    --run "$WORK/runs/$1" --export "$WORK/ship/heads" --eval-ks "$EVAL_KS" "${EVAL[@]}" "${WL[@]}" \
    --head-dtype bfloat16 > "$WORK/eval-$1.log" 2>&1
}
run_eval eagle3 0 & V0=$!
run_eval peagle $((NGPU > 1 ? 1 : 0)) & V1=$!
FAIL=0
wait $V0 || FAIL=1; wait $V1 || FAIL=1
cat "$WORK/eval-eagle3.log" "$WORK/eval-peagle.log"
[ "$FAIL" = 0 ] || { echo "evaluation failed"; exit 1; }
mark eval $t

# ---------------------------------------------------------------- 5 package
t=$SECONDS
for m in eagle3 peagle; do
  mkdir -p "$WORK/ship/runs/$m"
  cp "$WORK/runs/$m/log.jsonl" "$WORK/runs/$m/summary.json" "$WORK/train-$m.log" "$WORK/eval-$m.log" "$WORK/ship/runs/$m/"
done
cp "$WORK"/bench-*.log "$WORK/ship/" 2>/dev/null || true
echo "{${STAGES%, }}" > "$WORK/ship/stage_seconds.json"
"$PY" -m peagle_lab.train.report "$WORK/ship" --out "$WORK/ship/results.json"
cp "$WORK/ship/results.json" "$OUT/"
[ -f "$WORK/ship/throughput.json" ] && cp "$WORK/ship/throughput.json" "$OUT/"
tar -C "$WORK/ship" -czf - . | split -b 15m -d -a 1 - "$OUT/heads.tgz.part-"
ls -la "$OUT"
mark package $t
echo "### done in $((SECONDS - T0))s; stage seconds: {${STAGES%, }}"

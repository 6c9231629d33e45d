#!/usr/bin/env bash
# One training session on the H200 machine (1 or 2 GPUs), offline, in about 20 minutes:
#   1 data     self-distilled by our engine on every GPU (torchrun, sharded by rank), ≥ 70 % greedy
#   2 train    the heads of RUNS (default "eagle3:1 peagle:1"), each alone on its own GPU for the same
#              wall-clock budget, NGPU at a time; WSD schedule, learning curve
#   3 bench    training throughput per method (peagle_lab.train.bench) → throughput.json, after
#              training so that inductor's disk cache already holds the compiled step
#   4 eval     acceptance per K and per position with the real engine: held-out prompts, and the
#              chat / code benchmark workloads that no training saw; heads exported in bf16
#   5 package  results.json (goals, curves, throughput), heads + logs → $OUT/heads.tgz.part-N (≤ 15 MiB)
#   6 depth    (DEPTH=1) scripts/gpu/depth_bench_h200.sh ranks the exported P-EAGLE depths by measured TPS
#
# Needs $OUT and the converted model ($PEAGLE_LAB_CACHE/models/SmolLM2-135M-Instruct; see
# scripts/gpu/stage_h200.sh). Knobs (environment): PYTHON, WORK, SEED, DATA_TOKENS (40000000),
# DATA_BUDGET_S (220), TRAIN_BUDGET_S (450, per run), NUM_MAGPIE (400 × GPUs × DATA_BUDGET_S: 160000 for one GPU and
# 400 s, which one H200 decodes in about 393 s), ROW_LEN (2048), BATCH (16 rows a
# GPU), LR (1e-3), RUNS ("METHOD:LAYERS[:WARM_START_HEAD] ...", e.g. "eagle3:1:peagle_lab/heads/eagle3 peagle:4
# peagle:2"; PEAGLE_LAYERS / INIT_EAGLE3 / INIT_PEAGLE shape the default), EVAL_KS, SKIP_BENCH=1, SKIP_DATA=1,
# EVAL_HEADS ("NAME=HEAD_DIR ...": heads trained before, e.g. the shipped ones, evaluated beside the new runs on
# the same prompts; their weights stay out of the archive), DEPTH=1 (then scripts/gpu/depth_bench_h200.sh ranks
# every exported peagle-<N>l head by throughput; its files land in $OUT too), SWEEP=1 (then the K sweep of the
# results index with the new heads → $OUT/sweep_bench.json; SWEEP_PEAGLE / SWEEP_EAGLE3 pick other heads, SWEEP_PREVIOUS
# adds an earlier P-EAGLE head's cells, SWEEP_BUDGET_S its time budget (300), SWEEP_PROMPTS prompts a c = 1 cell (16),
# SWEEP_EXTRA more bench flags, e.g. "--stop-at-eos").
# COMPILE_CACHE_IN: a folder of compile caches from an earlier session (its $OUT/compile_cache.tar.part-*, unpacked
# and carried e.g. as .stage/compile_cache): each run loads METHOD-<L>l.bin before its first step and writes its own back, so
# the first step, which compiles (84-124 s of a 300 s budget on a fresh machine), mostly hits the cache.
# OPENING_WEIGHT: weight of the "openings" Magpie domain (user turns begun with a hand-written request's first words;
# the eleven domain system prompts weigh 13 together), 0 (the default) leaves it out.
# TRAIN_STEPS: every run trains exactly this many steps instead of TRAIN_BUDGET_S (an A/B: on a fresh machine the first
# run compiles for ~110 s of its budget and the next one for ~60 s, so equal budgets give two such runs about 776 and
# 1076 steps); a run then takes as long as its steps do.
# TRAIN_EXTRA: more flags for every train run (a recipe experiment, e.g. "--cod-ratio-min 0.3": more deep COD elements).
# BESIDE: a command (e.g. the GPU suite) run in the background from the end of the data stage on; see there.
# EVAL_TOGETHER=1: one evaluation process for every run, on the first GPU (the target, its plain-decoding reference and
# the compiled decode step load once, not once a head: for one GPU and several heads). WORKLOAD_KS: the K values measured
# on the benchmark workloads (the eval's default 3,7; e.g. 1,2,3,4,5,6,7,8 for AL per K there too). EVAL_WORKLOADS:
# other workloads than chat,code (SMOKE: none unless given). PACK_HEADS=0: results and logs only, no heads.tgz or
# compile-cache parts in $OUT (the exported heads stay in $WORK/ship/heads, where h200_wait.sh's FETCH_HEADS finds them).
# SMOKE=1 DEVICE=cpu runs every stage on the tiny random target in a few minutes (checks this script).
# Reassemble:  cat heads.tgz.part-* | tar -xzf -
set -euo pipefail
cd "$(dirname "$0")/../.."
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
  [ -f "$MODEL/config.json" ] || { echo "no model folder at $MODEL (source scripts/gpu/stage_h200.sh first)"; exit 2; }
  DATA_TOKENS=${DATA_TOKENS:-40000000}; DATA_BUDGET_S=${DATA_BUDGET_S:-220}; TRAIN_BUDGET_S=${TRAIN_BUDGET_S:-450}
  NGPU=$(nvidia-smi -L | wc -l)
  # Magpie samples for the budget: 160k feed one H200 for about 393 s of a 400 s budget, and the
  # generator's throughput grows with the GPUs, so 400 per GPU-second of budget
  NUM_MAGPIE=${NUM_MAGPIE:-$((400 * NGPU * DATA_BUDGET_S))}
  TGT=(--model "$MODEL"); DATA=(--num-magpie "$NUM_MAGPIE" --max-code-prompts 4096 --max-math-prompts 8000
                               --max-writing-prompts 8000 --response-max-tokens 320 --concurrency 1024
                               --heldout-fraction 0.01)
  ROW_LEN=${ROW_LEN:-2048}; BATCH=${BATCH:-16}; VOCAB=8192; EVAL=(--eval-prompts 96 --eval-max-new-tokens 128
  --concurrency 96); WL=(--workloads chat,code); EVAL_KS=${EVAL_KS:-1,2,3,4,5,6,7,8}; BENCH_STEPS=4
fi
[ -z "${EVAL_WORKLOADS:-}" ] || WL=(--workloads "$EVAL_WORKLOADS")
[ -z "${WORKLOAD_KS:-}" ] || WL+=(--workload-ks "$WORKLOAD_KS")
LR=${LR:-1e-3}
case ${TRAIN_STEPS:-1} in ''|*[!0-9]*|0) echo "TRAIN_STEPS='$TRAIN_STEPS' is not a positive integer"; exit 2 ;; esac
LENGTH=(--time-budget-s "$TRAIN_BUDGET_S"); [ -z "${TRAIN_STEPS:-}" ] || LENGTH=(--steps "$TRAIN_STEPS")
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

# RUNS: METHOD:LAYERS[:WARM_START_HEAD[:FLAGS]] each, parsed before the data stage so that a bad spec fails at
# once; run i goes to GPU i mod NGPU, in waves of NGPU runs, every run alone on its GPU for TRAIN_BUDGET_S (the
# fair protocol: the same GPU for the same time). FLAGS: train flags for this run alone, comma-separated (e.g.
# "peagle:4:HEAD:--cod-ratio-min=0.3,--lr=5e-4", a recipe A/B beside "peagle:4:HEAD"; "peagle:4:HEAD:--exclude-domains,openings",
# a data A/B: the same data without one domain); such a run is named after them (peagle-4l-cod-ratio-min-0.3-lr-5e-4,
# peagle-4l-exclude-domains-openings), so give the sweep its head with SWEEP_PEAGLE.
read -r -a SPECS <<< "${RUNS:-eagle3:1${INIT_EAGLE3:+:$INIT_EAGLE3} peagle:${PEAGLE_LAYERS:-1}${INIT_PEAGLE:+:$INIT_PEAGLE}}"
NAMES=(); METHODS=(); LAYERS=(); INITS=(); FLAGS=()
for spec in "${SPECS[@]}"; do
  IFS=: read -r m l init flags <<< "$spec"
  case $m in eagle3|peagle) ;; *) echo "RUNS: unknown method '$m' in '$spec' (expected eagle3:N or peagle:N[:HEAD[:FLAGS]])"; exit 2 ;; esac
  case $l in ''|*[!0-9]*|0) echo "RUNS: layers '$l' in '$spec' is not a positive integer"; exit 2 ;; esac
  n="$m-${l}l"
  [ -z "${flags:-}" ] || n="$n-$(echo "$flags" | tr -c 'A-Za-z0-9.\n' '-' | tr -s '-' | sed 's/^-//; s/-$//')"
  for old in "${NAMES[@]}"; do [ "$old" = "$n" ] && { echo "RUNS: two runs named $n (give one of them FLAGS)"; exit 2; }; done
  NAMES+=("$n"); METHODS+=("$m"); LAYERS+=("$l"); INITS+=("${init:-}"); FLAGS+=("${flags:-}")
done

# ---------------------------------------------------------------- 1 data (every GPU, torchrun)
t=$SECONDS
EXCL=()
for f in "$REPO"/peagle_lab/bench/data/*.jsonl "$REPO"/peagle_lab/bench/data/*.txt; do [ -f "$f" ] && EXCL+=(--exclude-file "$f"); done
[ "${SKIP_DATA:-0}" = 1 ] && [ -f "$WORK/data/card.json" ] && echo "SKIP_DATA=1: reusing $WORK/data" || \
"$PY" -m torch.distributed.run --nproc-per-node "$NGPU" --master-port 29511 -m peagle_lab.train.cli data \
  "${TGT[@]}" --device "$DEVICE" --out "$WORK/data" "${DATA[@]}" --target-tokens "$DATA_TOKENS" \
  --time-budget-s "$DATA_BUDGET_S" --seed "$SEED" --opening-weight "${OPENING_WEIGHT:-0}" --no-progress "${EXCL[@]}"
cp "$WORK/data/card.json" "$WORK/data/card.md" "$WORK/ship/data/"
mark data $t
# BESIDE: a command run in the background from here on, beside training and evaluation (not beside the data stage,
# whose time budget it would share), e.g. BESIDE='bash scripts/gpu/gpu_tests.sh $OUT/gpu_suite': the GPU suite at
# this commit without device time of its own (the whole suite takes about 540 s beside 760 s of training). Its output
# goes to $OUT/beside.log; its exit status is reported at the end and does not fail the session.
if [ -n "${BESIDE:-}" ]; then
  export OUT WORK  # for the command's own use ($OUT/gpu_suite)
  ( s=$SECONDS; rc=0; bash -c "$BESIDE" > "$OUT/beside.log" 2>&1 || rc=$?
    echo "$rc $((SECONDS - s))" > "$WORK/beside.rc" ) &
  BESIDE_PID=$!
fi

# ---------------------------------------------------------------- 2 train (each head alone on a GPU)
t=$SECONDS
COMMON=("${TGT[@]}" --device "$DEVICE" --batch-size "$BATCH" --row-len "$ROW_LEN" --seed "$SEED")
COMPILE_CACHES=$WORK/compile_cache; mkdir -p "$COMPILE_CACHES"
if [ -n "${COMPILE_CACHE_IN:-}" ]; then
  cp "$COMPILE_CACHE_IN"/*.bin "$COMPILE_CACHES/" 2>/dev/null && echo "compile caches from $COMPILE_CACHE_IN: $(ls "$COMPILE_CACHES")" \
    || echo "COMPILE_CACHE_IN=$COMPILE_CACHE_IN holds no *.bin: every run compiles from scratch"
fi
TRAIN=("${COMMON[@]}" --data "$WORK/data" --lr "$LR" --schedule wsd --warmup-fraction 0.03 --decay-fraction 0.25
       --log-every 50 --ckpt-every 500 --eval-every 250 --heldout-rows 32 --no-eval --no-progress)
waves() {  # waves FUNCTION: FUNCTION INDEX GPU for every run, NGPU at a time; fails if any failed
  local rc=0 i j pids
  for ((i = 0; i < ${#NAMES[@]}; i += NGPU)); do
    pids=()
    for ((j = i; j < i + NGPU && j < ${#NAMES[@]}; j++)); do "$1" "$j" $((j - i)) & pids+=($!); done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  done
  return $rc
}
train_one() {  # train_one INDEX GPU
  local n=${NAMES[$1]} start=(--draft-vocab-size "$VOCAB")  # a fresh head's vocabulary; a warm start keeps its own
  [ -z "${INITS[$1]:-}" ] || start=(--init-from "${INITS[$1]}")  # (a FLAGS --draft-vocab-size grows it)
  CUDA_VISIBLE_DEVICES=$(gpu "$2") TORCH_LOGS=recompiles "$PY" -m peagle_lab.train.cli train --method "${METHODS[$1]}" \
    --layers "${LAYERS[$1]}" "${start[@]}" --out "$WORK/runs/$n" "${TRAIN[@]}" \
    --compile-cache "$COMPILE_CACHES/${METHODS[$1]}-${LAYERS[$1]}l.bin" \
    "${LENGTH[@]}" ${TRAIN_EXTRA:-} ${FLAGS[$1]//,/ } > "$WORK/train-$n.log" 2>&1 \
    || { echo "training $n failed"; return 1; }
}
FAIL=0; waves train_one || FAIL=1
# EVAL_HEADS: earlier heads join the evaluation as run folders of their own (head/ + their summary.json).
EVAL_ONLY=()
for pair in ${EVAL_HEADS:-}; do
  n=${pair%%=*}; dir=${pair#*=}
  [ -f "$dir/summary.json" ] || { echo "EVAL_HEADS: $dir has no summary.json (expected NAME=HEAD_DIR of an exported head)"; exit 2; }
  mkdir -p "$WORK/runs/$n"; rm -rf "$WORK/runs/$n/head"; ln -s "$(cd "$dir" && pwd)" "$WORK/runs/$n/head"
  cp "$dir/summary.json" "$WORK/runs/$n/"; NAMES+=("$n"); EVAL_ONLY+=("$n")
done
for n in "${NAMES[@]}"; do [ -f "$WORK/train-$n.log" ] || continue; echo "----- $n -----"; grep -v "^\s*$" "$WORK/train-$n.log" | tail -25; done
[ "$FAIL" = 0 ] || exit 1
mark train $t

# ---------------------------------------------------------------- 3 training throughput (warm compile cache)
t=$SECONDS
bench_one() {  # bench_one INDEX GPU (trained runs only)
  local n=${NAMES[$1]}
  [ -n "${METHODS[$1]:-}" ] || return 0
  CUDA_VISIBLE_DEVICES=$(gpu "$2") "$PY" -m peagle_lab.train.bench "${COMMON[@]}" --draft-vocab-size "$VOCAB" --data "$WORK/data" \
    --methods "${METHODS[$1]}" --layers "${LAYERS[$1]}" --steps $BENCH_STEPS --warmup 2 --out "$WORK/bench-$n.json" \
    > "$WORK/bench-$n.log" 2>&1 || echo "bench $n failed (training goes on)"
}
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  waves bench_one
  cat "$WORK"/bench-*.log | grep -v "^\s*$" | tail -20
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
eval_one() {  # eval_one INDEX GPU
  local n=${NAMES[$1]}
  CUDA_VISIBLE_DEVICES=$(gpu "$2") "$PY" -m peagle_lab.train.cli eval "${TGT[@]}" --device "$DEVICE" --data "$WORK/data" \
    --run "$WORK/runs/$n" --export "$WORK/ship/heads" --eval-ks "$EVAL_KS" "${EVAL[@]}" "${WL[@]}" \
    --head-dtype bfloat16 > "$WORK/eval-$n.log" 2>&1 || { echo "evaluation of $n failed"; return 1; }
}
eval_together() {  # every run in one process on the first GPU (EVAL_TOGETHER=1)
  local runs=() n
  for n in "${NAMES[@]}"; do runs+=("$WORK/runs/$n"); done
  CUDA_VISIBLE_DEVICES=$(gpu 0) "$PY" -m peagle_lab.train.cli eval "${TGT[@]}" --device "$DEVICE" --data "$WORK/data" \
    --run "${runs[@]}" --export "$WORK/ship/heads" --eval-ks "$EVAL_KS" "${EVAL[@]}" "${WL[@]}" \
    --head-dtype bfloat16 > "$WORK/eval-all.log" 2>&1 || { echo "evaluation failed"; return 1; }
}
FAIL=0
if [ "${EVAL_TOGETHER:-0}" = 1 ]; then eval_together || FAIL=1; cat "$WORK/eval-all.log"
else waves eval_one || FAIL=1; for n in "${NAMES[@]}"; do cat "$WORK/eval-$n.log"; done; fi
[ "$FAIL" = 0 ] || exit 1
mark eval $t

# ---------------------------------------------------------------- 5 package
t=$SECONDS
EXCLUDE=()
for n in "${NAMES[@]}"; do
  mkdir -p "$WORK/ship/runs/$n"
  for f in "$WORK/runs/$n/log.jsonl" "$WORK/runs/$n/summary.json" "$WORK/train-$n.log" "$WORK/eval-$n.log"; do
    [ -f "$f" ] && cp "$f" "$WORK/ship/runs/$n/"
  done
done
for n in "${EVAL_ONLY[@]}"; do EXCLUDE+=(--exclude "./heads/$n/*.safetensors"); done
cp "$WORK"/bench-*.log "$WORK"/eval-all.log "$WORK/ship/" 2>/dev/null || true
echo "{${STAGES%, }}" > "$WORK/ship/stage_seconds.json"
"$PY" -m peagle_lab.train.report "$WORK/ship" --out "$WORK/ship/results.json"
cp "$WORK/ship/results.json" "$OUT/"
[ -f "$WORK/ship/throughput.json" ] && cp "$WORK/ship/throughput.json" "$OUT/"
if [ "${PACK_HEADS:-1}" = 0 ]; then
  echo "PACK_HEADS=0: the heads stay in $WORK/ship/heads, unpacked, and the compile caches in $COMPILE_CACHES"
else
  tar -C "$WORK/ship" "${EXCLUDE[@]}" -czf - . | split -b 15m -d -a 1 - "$OUT/heads.tgz.part-"
  # The compile caches (gzip already, about 12 MB for a P-EAGLE run and 30 MB for an EAGLE-3 run) travel apart from the
  # heads, so that fetching them is optional: the next session's COMPILE_CACHE_IN (cat compile_cache.tar.part-* | tar -x).
  ls "$COMPILE_CACHES"/*.bin > /dev/null 2>&1 && tar -C "$COMPILE_CACHES" -cf - . | split -b 15m -d -a 1 - "$OUT/compile_cache.tar.part-"
fi
ls -la "$OUT"
mark package $t
# ---------------------------------------------------------------- 6 depth by throughput (DEPTH=1), after the heads are packaged
if [ "${DEPTH:-0}" = 1 ]; then
  t=$SECONDS
  KEPT="$WORK/ship/heads" WORK="$WORK" DEPTH_PACK_HEAD=0 PYTHON="$PY" bash scripts/gpu/depth_bench_h200.sh \
    || echo "depth benchmark failed (the heads are packaged all the same)"
  mark depth $t
fi

# ---------------------------------------------------------------- 7 K sweep with the new heads (SWEEP=1)
# The throughput sweep of the results index's K-scaling table: plain, EAGLE-3 and P-EAGLE, K = 1..8, c = 1 and 64, chat
# and code, then the P-EAGLE cells again with SWEEP_PREVIOUS (an earlier head) in the same session.
if [ "${SWEEP:-0}" = 1 ] && [ "${SMOKE:-0}" != 1 ]; then  # the sweep needs the real model
  t=$SECONDS
  first() { for d in "$@"; do [ -f "$d/config.json" ] && { echo "$d"; return; }; done; }
  SP=${SWEEP_PEAGLE:-$(first "$WORK"/ship/heads/peagle-*l)}
  SE=${SWEEP_EAGLE3:-$(first "$WORK"/ship/heads/eagle3-*l peagle_lab/heads/eagle3)}
  # 16 prompts a cell at c = 1 (the bench's default is 4). Cells decode a fixed 128 tokens past EOS, the evaluation
  # stops at EOS, so the sweep's code AL reads lower than the evaluation's (e.g. 2.54 against 3.33 at K = 7 for one head);
  # SWEEP_EXTRA="--stop-at-eos" measures real response lengths instead.
  SWEEP_ARGS=(-k 2 3 4 5 7 -c 1 64 --workloads chat code --device "$DEVICE" --no-reference
              --min-prompts "${SWEEP_PROMPTS:-16}" --time-budget-s "${SWEEP_BUDGET_S:-300}" ${SWEEP_EXTRA:-})
  "$PY" -m peagle_lab.cli bench --methods baseline eagle3 peagle "${SWEEP_ARGS[@]}" --eagle3-head "$SE" \
    --peagle-head "$SP" --out "$WORK/sweep" > "$WORK/sweep.log" 2>&1 && cp "$WORK/sweep/bench.json" "$OUT/sweep_bench.json" \
    || echo "K sweep failed (the heads are packaged all the same)"
  grep -v "^\[" "$WORK/sweep.log" | tail -15
  if [ -n "${SWEEP_PREVIOUS:-}" ]; then
    "$PY" -m peagle_lab.cli bench --methods peagle "${SWEEP_ARGS[@]}" --peagle-head "$SWEEP_PREVIOUS" \
      --out "$WORK/sweep_prev" > "$WORK/sweep_prev.log" 2>&1 \
      && cp "$WORK/sweep_prev/bench.json" "$OUT/sweep_previous_peagle_head.json" || echo "previous-head sweep failed"
  fi
  mark sweep $t
fi

if [ -n "${BESIDE_PID:-}" ]; then
  wait "$BESIDE_PID" || true
  read -r brc bs < "$WORK/beside.rc" || brc=unknown
  echo "### beside ($BESIDE): exit $brc in ${bs:-?}s, its log in \$OUT/beside.log"
fi
echo "### done in $((SECONDS - T0))s; stage seconds: {${STAGES%, }}"

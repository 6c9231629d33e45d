#!/usr/bin/env bash
# Train the SmolLM2-135M-Instruct heads on one H200 in about 7-8 minutes, offline:
#   0 preflight  (tiny model on the GPU: every code path once, ~15 s, fails fast)
#   1 data       (Magpie + stdlib prompts, greedy + sampled responses by the target; time-boxed)
#   2 train      (EAGLE-3 1 layer and P-EAGLE 1 layer side by side on the one GPU, time-boxed)
#   3 eval       (held-out acceptance per position at K = 3, 5, 7 with the real engine; bf16 export + cards)
#   4 memory     (scripts/bench_train_memory.py: one 8k-token sequence, 8 depths, S = 8, 4, 2, 1)
#   5 package    (heads + cards + logs → $OUT/heads.tgz.part-N, each ≤ 15 MiB; results.json)
#
# Needs: $OUT (the folder that comes back) and the converted model folder
# $PEAGLE_LAB_CACHE/models/SmolLM2-135M-Instruct (config.json, model.safetensors, tokenizer files).
# Knobs (environment): PYTHON, MODEL, WORK, DATA_BUDGET_S (140), TRAIN_BUDGET_S (180),
# RUNS_SPEC (the heads trained side by side, METHOD:LAYERS each; default "eagle3:1 peagle:1";
# the P-EAGLE depth study uses "peagle:1 peagle:2 peagle:3 peagle:4"), SHIP_WEIGHTS (which of
# those runs put their weights in the archive; default all; "none" for a study whose winner is
# packaged later by scripts/depth_bench_h200.sh), SKIP_MEMORY=1 (no memory benchmark),
# SKIP_PREFLIGHT=1 (no tiny-model preflight, for a repeat on a machine where it passed),
# EXCLUDE_FILES (prompt lists never to train on; peagle_lab/bench/data/*.jsonl|*.txt are added
# automatically).
# SMOKE=1 DEVICE=cpu runs every stage with the tiny random target in a few minutes on a CPU
# (it checks this script, not the heads).
# Reassemble the heads with:  cat heads.tgz.part-* | tar -xzf -
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python}
OUT=${OUT:?set OUT to the output folder}
WORK=${WORK:-${TMPDIR:-/tmp}/peagle_train_$$}
DATA_BUDGET_S=${DATA_BUDGET_S:-140}
TRAIN_BUDGET_S=${TRAIN_BUDGET_S:-180}
RUNS_SPEC=${RUNS_SPEC:-"eagle3:1 peagle:1"}
DEVICE=${DEVICE:-cuda}
if [ "${SMOKE:-0}" != 1 ]; then
  CACHE=${PEAGLE_LAB_CACHE:?set PEAGLE_LAB_CACHE (the converted model lives in \$PEAGLE_LAB_CACHE/models)}
  MODEL=${MODEL:-$CACHE/models/SmolLM2-135M-Instruct}
fi
if [ "${SMOKE:-0}" = 1 ]; then
  TGT=(--tiny); MAGPIE=64; CODE=32; RESP=16; CONC=64; BATCH=8; VOCAB=64; EVAL_P=8; EVAL_T=16; MEM_LEN=256
  CACHE=${PEAGLE_LAB_CACHE:-unused}
else
  TGT=(--model "${MODEL:-}"); MAGPIE=8192; CODE=1024; RESP=256; CONC=1024; BATCH=32; VOCAB=8192; EVAL_P=128
  EVAL_T=128; MEM_LEN=8192
fi
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} PEAGLE_LAB_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/train_heads_h200.log") 2>&1
TEE_PID=$!
trap 'exec 1>&- 2>&-; wait "$TEE_PID" 2>/dev/null || true' EXIT  # let tee finish the log file

T0=$(date +%s.%N)
TIMES=""
now() { date +%s.%N; }
since() { "$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
mark() { local s; s=$(since "$2"); TIMES="$TIMES\"$1\": $s, "; echo "### stage $1 took ${s}s (total $(since "$T0")s)"; }

echo "### peagle_lab train_heads_h200.sh on $(hostname) at $(date -u +%FT%TZ); work dir $WORK"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
git -C "$REPO" rev-parse HEAD 2>/dev/null || echo "(no git metadata)"
[ "${SMOKE:-0}" = 1 ] || [ -f "$MODEL/config.json" ] || {
  echo "no model folder at $MODEL (stage the converted SmolLM2 HF folder there)"; exit 2; }

# ---------------------------------------------------------------- 0 preflight
t=$(now)
[ "${SKIP_PREFLIGHT:-0}" = 1 ] && echo "SKIP_PREFLIGHT=1: no preflight" || "$PY" - "$WORK/preflight" "$DEVICE" <<'PYEOF'
import sys
from peagle_lab.train.cli import main
w, common = sys.argv[1], ["--tiny", "--device", sys.argv[2], "--no-progress"]
rc = main(["data", "--out", f"{w}/data", "--num-magpie", "64", "--max-code-prompts", "32", "--response-max-tokens", "16",
           "--concurrency", "64", "--heldout-fraction", "0.3", *common])
for m in ("eagle3", "peagle"):
    rc = rc or main(["train", "--method", m, "--data", f"{w}/data", "--out", f"{w}/runs/{m}", "--steps", "4",
                     "--segments", "2", "--eval-prompts", "2", "--eval-max-new-tokens", "8", "--eval-ks", "2",
                     "--draft-vocab-size", "64", "--log-every", "2", *common])
rc = rc or main(["eval", "--run", f"{w}/runs/eagle3", f"{w}/runs/peagle", "--data", f"{w}/data", "--export",
                 f"{w}/heads", "--eval-prompts", "4", "--eval-max-new-tokens", "8", "--eval-ks", "2,3", *common])
sys.exit(rc)
PYEOF
mark preflight "$t"

# ---------------------------------------------------------------- 1 data
t=$(now)
EXCL=()
for f in ${EXCLUDE_FILES:-} "$REPO"/peagle_lab/bench/data/*.jsonl "$REPO"/peagle_lab/bench/data/*.txt; do
  [ -f "$f" ] && EXCL+=(--exclude-file "$f")
done
echo "exclusion files: ${EXCL[*]:-(none besides the built-in demo prompts)}"
"$PY" -m peagle_lab.train.cli data "${TGT[@]}" --device "$DEVICE" --out "$WORK/data" \
  --num-magpie $MAGPIE --max-code-prompts $CODE --response-max-tokens $RESP --concurrency $CONC \
  --heldout-fraction 0.04 --time-budget-s "$DATA_BUDGET_S" --seed 0 "${EXCL[@]}"
mark data "$t"

# ---------------------------------------------------------------- 2 train (side by side)
t=$(now)
COMMON=(--data "$WORK/data" "${TGT[@]}" --device "$DEVICE" --steps 100000 --time-budget-s "$TRAIN_BUDGET_S"
        --batch-size $BATCH --max-seq-len 512 --lr 1e-3 --warmup-steps 100 --draft-vocab-size $VOCAB
        --ckpt-every 0 --no-eval --no-progress --log-every 100 --seed 0)
RUNS=(); PIDS=()
for spec in $RUNS_SPEC; do
  method=${spec%%:*}; layers=${spec##*:}; run="$method-${layers}l"
  case $method in eagle3) ktrain=7 ;; peagle) ktrain=8 ;; *) echo "RUNS_SPEC: unknown method '$method' in '$spec' (expected eagle3:N or peagle:N)"; exit 2 ;; esac
  RUNS+=("$run")
  "$PY" -m peagle_lab.train.cli train --method "$method" --layers "$layers" --k-train $ktrain --out "$WORK/runs/$run" \
    "${COMMON[@]}" > "$WORK/train-$run.log" 2>&1 & PIDS+=($!)
done
FAIL=0
for i in "${!PIDS[@]}"; do
  wait "${PIDS[$i]}" || { echo "training ${RUNS[$i]} failed"; FAIL=1; }
  echo "----- ${RUNS[$i]} -----"; cat "$WORK/train-${RUNS[$i]}.log"
done
[ "$FAIL" = 0 ] || exit 1
mark train "$t"

# ---------------------------------------------------------------- 3 eval + export
t=$(now)
"$PY" -m peagle_lab.train.cli eval "${TGT[@]}" --device "$DEVICE" --data "$WORK/data" --export "$WORK/ship/heads" \
  --run $(for r in "${RUNS[@]}"; do printf '%s ' "$WORK/runs/$r"; done) \
  --eval-ks 3,5,7 --eval-prompts $EVAL_P --eval-max-new-tokens $EVAL_T --concurrency 128 --head-dtype bfloat16
mark eval "$t"

# ---------------------------------------------------------------- 4 memory benchmark
t=$(now)
if [ "${SKIP_MEMORY:-0}" = 1 ]; then echo "SKIP_MEMORY=1: no memory benchmark"; else
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$PY" scripts/bench_train_memory.py --out "$OUT/train_memory.json" --device "$DEVICE" --seq-len $MEM_LEN --k-train 8 --layers 2 \
  --segments 8,4,2,1 || echo "memory benchmark failed (the heads are unaffected)"
fi
mark memory "$t"

# ---------------------------------------------------------------- 5 package
t=$(now)
mkdir -p "$WORK/ship/data" "$WORK/ship/runs"
cp "$WORK/data/card.json" "$WORK/data/card.md" "$WORK/ship/data/"
for r in "${RUNS[@]}"; do
  mkdir -p "$WORK/ship/runs/$r"
  cp "$WORK/runs/$r/log.jsonl" "$WORK/runs/$r/summary.json" "$WORK/train-$r.log" "$WORK/ship/runs/$r/"
done
# Runs outside SHIP_WEIGHTS ship as numbers and a card, not weights (the archive must stay ≤ 5
# parts); their exported heads stay in $WORK/ship/heads for later steps on the same machine.
for r in "${RUNS[@]}"; do
  case " ${SHIP_WEIGHTS:-${RUNS[*]}} " in *" $r "*) ;; *)
    mkdir -p "$WORK/heads-kept"; cp -r "$WORK/ship/heads/$r" "$WORK/heads-kept/"
    find "$WORK/ship/heads/$r" -name '*.safetensors*' -delete ;;
  esac
done
"$PY" - "$WORK/ship" "$OUT/results.json" "{${TIMES%, }}" "$(since "$T0")" <<'PYEOF'
import json, sys
from pathlib import Path
ship, out, times, total = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4])
heads = {}
for s in sorted((ship / "heads").glob("*/summary.json")):
    d = json.loads(s.read_text())
    heads[s.parent.name] = {k: d.get(k) for k in ("method", "num_hidden_layers", "steps", "wall_s", "first_loss",
                                                   "last_loss", "vocab_coverage", "baseline_tps", "depth_acc")}
    heads[s.parent.name]["acceptance"] = {r["k"]: {"AL": round(r["acceptance_length"], 3),
                                                   "per_position": [round(a, 3) for a in r["per_position_acceptance"]],
                                                   "tps": round(r["tps"])} for r in d.get("acceptance", [])}
card = json.loads((ship / "data" / "card.json").read_text())
res = {"stage_seconds": {**times, "total_before_package": total}, "data": card["splits"],
       "data_timings_s": card.get("timings_s"), "heads": heads}
al = lambda h, k: heads.get(h, {}).get("acceptance", {}).get(k, {}).get("AL")
# The goals compare the first EAGLE-3 run with the first P-EAGLE run (whatever their depths).
e3_run = next((h for h in heads if heads[h].get("method") == "eagle3"), None)
p_run = next((h for h in heads if heads[h].get("method") == "peagle"), None)
e3, p7 = al(e3_run, 7), al(p_run, 7)
res["goals"] = {"eagle3_run": e3_run, "peagle_run": p_run,
                "eagle3_AL_at_K3": al(e3_run, 3), "eagle3_AL_at_K3_goal_2.2": (al(e3_run, 3) or 0) >= 2.2,
                "peagle_over_eagle3_AL_at_K7": (p7 / e3) if e3 and p7 else None,
                "peagle_over_eagle3_goal_1.15": bool(e3 and p7 and p7 >= 1.15 * e3)}
out.write_text(json.dumps(res, indent=2) + "\n")
print(json.dumps(res["goals"], indent=2))
for name, h in heads.items():
    print(name, {k: v["AL"] for k, v in h["acceptance"].items()}, f"steps {h['steps']}, last loss {h['last_loss']:.3f}")
PYEOF
cp "$OUT/results.json" "$WORK/ship/"
tar -C "$WORK/ship" -czf - . | split -b 15m -d -a 1 - "$OUT/heads.tgz.part-"
ls -la "$OUT"
N=$(ls "$OUT"/heads.tgz.part-* | wc -l)
[ "$N" -le 5 ] || echo "WARNING: $N archive parts; with the log, results.json and train_memory.json that is over 8 files"
mark package "$t"
echo "### done in $(since "$T0")s; stage seconds: {${TIMES%, }}"

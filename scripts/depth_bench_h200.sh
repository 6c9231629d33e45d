#!/usr/bin/env bash
# Choose the P-EAGLE head's depth by measured throughput (issue 5), on the H200, after
# `RUNS_SPEC="peagle:1 peagle:2 peagle:3 peagle:4" SHIP_WEIGHTS=none bash scripts/train_heads_h200.sh`
# left the exported heads in $WORK/heads-kept/peagle-{1,2,3,4}l (same data, same wall-clock budget,
# trained side by side).
#
# Each head gets the same P-EAGLE sweep through scripts/bench_h200.sh (bf16, CUDA graphs, 128 new
# tokens, K ∈ {3,5,7}, c ∈ {1,64}, chat + code); `python -m peagle_lab.bench.depth` ranks them by the
# geometric mean of best-K TPS over those columns. Everything (the per-depth bench.json/log, the
# choice and the winner's head) goes into $OUT/depth.tgz.part-N (≤ 15 MiB each):
#   cat depth.tgz.part-* | tar -xzf -
# Knobs: WORK (default /tmp/work), PYTHON, DEPTH_BENCH_FLAGS (extra flags for every bench run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/work}
OUT=${OUT:?set OUT to the output folder}
KEPT=$WORK/heads-kept
DEST=$WORK/depth
mkdir -p "$DEST" "$OUT"
PAIRS=()
for head in "$KEPT"/peagle-*l; do
  [ -d "$head" ] || { echo "no heads under $KEPT (run scripts/train_heads_h200.sh with SHIP_WEIGHTS=none first)"; exit 2; }
  n=$(basename "$head"); n=${n#peagle-}; n=${n%l}
  echo "### depth $n: $head"
  OUT="$DEST/peagle-${n}l" PYTHON="$PY" bash scripts/bench_h200.sh --methods peagle --peagle-head "$head" \
    -k 3 5 7 --extra-k -c 1 64 --workloads chat code --no-reference --time-budget-s 150 ${DEPTH_BENCH_FLAGS:-} \
    > "$DEST/peagle-${n}l.log" 2>&1 || { echo "bench for depth $n failed:"; tail -20 "$DEST/peagle-${n}l.log"; exit 1; }
  tail -4 "$DEST/peagle-${n}l.log"
  PAIRS+=("$n=$DEST/peagle-${n}l/bench.json")
done
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$PY" -m peagle_lab.bench.depth "${PAIRS[@]}" --out "$DEST/depth_choice.json" \
  | tee "$DEST/depth_choice.txt"
cp "$DEST/depth_choice.json" "$OUT/"
chosen=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['chosen_layers'])" "$DEST/depth_choice.json")
mkdir -p "$DEST/heads"; rm -rf "$DEST/heads/"*; cp -r "$KEPT/peagle-${chosen}l" "$DEST/heads/"
tar -C "$DEST" -czf - . | split -b 15m -d -a 1 - "$OUT/depth.tgz.part-"
ls -la "$OUT"
echo "chosen depth: $chosen layer(s); its head: $KEPT/peagle-${chosen}l"
